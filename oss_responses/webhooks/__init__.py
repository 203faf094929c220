"""OpenAI's background-mode webhooks: ``response.completed|failed|cancelled|incomplete`` to the configured
endpoints, signed with Standard Webhooks.

Flow: whoever ends a background response (the worker's runner, the reaper, the API cancelling a queued
one) logs one pending delivery per endpoint (``webhook_deliveries``) and queues one
``oss_responses.deliver_webhook`` task each on the ``webhooks`` queue (``notify.py``). A worker POSTs the
event (``delivery.py``, signed by ``signing.py``); a failed attempt is retried by Celery with exponential
backoff, each attempt with the same ``webhook-id`` (the event id, derived from the response id and the
event type), so a receiver can drop duplicates: delivery is at least once.
"""
