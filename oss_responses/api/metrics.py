"""What the API's ``/metrics`` serves: this process's metrics (or, with ``PROMETHEUS_MULTIPROC_DIR``, every
API process's, summed by prometheus_client's multiprocess collector) and the queue depths, read from the
broker at scrape time.

Multiprocess mode: set ``PROMETHEUS_MULTIPROC_DIR`` to an empty folder, the same for every process of one
API deployment (uvicorn ``--workers N``, gunicorn), and empty it when the deployment starts. Each process
writes its values there; any process's ``/metrics`` reads them all. Workers serve their own port instead.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import redis
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.registry import Collector

from oss_responses import redis_keys
from oss_responses.config import Settings
from oss_responses.metrics import QUEUE_DEPTH

log = logging.getLogger(__name__)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
_LIVE_GAUGE_FILE = re.compile(r"gauge_live\w*_(\d+)\.db")


class QueueDepthCollector(Collector):
    """Tasks waiting in each model's queue (and the webhooks queue): one LLEN each, at scrape time."""

    def __init__(self, client: redis.Redis, queues: Iterable[str]) -> None:
        self._client = client
        self._queues = list(queues)

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(QUEUE_DEPTH, "Tasks waiting in a Celery queue (responses.<model>, webhooks)",
                                   labels=["queue"])
        try:
            with self._client.pipeline(transaction=False) as pipe:
                for queue in self._queues:
                    pipe.llen(redis_keys.broker_queue(queue))
                lengths = pipe.execute()
        except redis.RedisError as exc:  # a scrape must still answer: the depths are left out
            log.warning("queue depths unavailable: %s", exc)
            return
        for queue, length in zip(self._queues, lengths, strict=True):
            family.add_metric([queue], length)
        yield family


class _Union(Collector):
    def __init__(self, *collectors: Collector) -> None:
        self._collectors = collectors

    def collect(self) -> Iterator[Metric]:
        for collector in self._collectors:
            yield from collector.collect()


class MetricsExporter:
    """Opened with the app's services; :meth:`render` is the body of ``GET /metrics``."""

    def __init__(self, settings: Settings, broker_url: str) -> None:
        """``broker_url``: the Redis that holds the queues (``TaskQueue.broker_url``)."""
        self._client = redis.Redis.from_url(broker_url, socket_timeout=2, socket_connect_timeout=2)
        queues = [settings.queue_for(model) for model in settings.models] + [settings.webhook_queue]
        self._collector = _Union(_process_metrics(), QueueDepthCollector(self._client, queues))

    async def render(self) -> bytes:
        # Blocking: the broker's LLENs and, in multiprocess mode, reading every process's files.
        return await anyio.to_thread.run_sync(generate_latest, self._collector)

    def close(self) -> None:
        self._client.close()


def _process_metrics() -> Collector:
    if not os.environ.get(MULTIPROC_ENV):
        return REGISTRY
    registry = CollectorRegistry()
    MultiProcessCollector(registry)  # type: ignore[no-untyped-call]  # prometheus_client leaves it unannotated
    return registry


@contextmanager
def multiprocess_folder() -> Iterator[Path]:
    """``PROMETHEUS_MULTIPROC_DIR`` for the API processes started within: the operator's if set (they
    empty it), else an empty folder of this run's own, removed afterwards. Set before any process starts:
    prometheus_client picks its storage when it is imported."""
    given = os.environ.get(MULTIPROC_ENV)
    if given:
        yield Path(given)
        return
    folder = tempfile.mkdtemp(prefix="oss-responses-metrics-")
    os.environ[MULTIPROC_ENV] = folder
    try:
        yield Path(folder)
    finally:
        del os.environ[MULTIPROC_ENV]
        shutil.rmtree(folder, ignore_errors=True)


def forget_dead_processes() -> None:
    """A process that died (uvicorn starts another) leaves its live gauges' files behind, and
    ``oss_responses_active_streams`` would count its streams for ever: a starting process removes them."""
    folder = os.environ.get(MULTIPROC_ENV)
    if not folder:
        return
    for path in Path(folder).glob("gauge_live*_*.db"):
        match = _LIVE_GAUGE_FILE.fullmatch(path.name)
        if match is not None and not _alive(int(match[1])):
            mark_process_dead(int(match[1]), folder)  # type: ignore[no-untyped-call]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True
