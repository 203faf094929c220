"""The worker side: a Celery app whose task runs one response on this process's engine.

- ``command``: the worker command (``python -m oss_responses.workers``): one Celery worker, or the
  supervisor of several over one vLLM engine core (``oss_responses.engine.frontends``).
- ``celery_app``: ``make_celery(settings)``; ``celery -A oss_responses.workers.celery_app worker``.
- ``tasks``: the ``oss_responses.run_response`` task and the bootstep that starts the worker.
- ``context``: what a worker holds (engine loop, engine, Redis, SQL, event writer, cancel listener).
- ``engine_loop``: the asyncio loop thread; ``runner``/``generation``: one response (``run_state``: a run's
  state; ``takeover``: a lost one's takeover decided; ``on_loop``: its part on the engine loop; ``handoff``:
  a run handed on; ``run_end``: its end, and a revoked queued one cancelled).
- ``lease``, ``cancel``, ``reaper``: exclusivity, cancellation, and no response left in_progress.
- ``testing``: ``run_response_now`` — one job, in-process, deterministic (arq's burst idea).
"""
