"""The worker's ``/metrics``: prometheus_client's HTTP server on ``worker_metrics_port``, a daemon thread.

Started by the worker's start-up bootstep (never at import), stopped with the worker. Each worker process
needs its own port; Prometheus scrapes each one (docker-compose / Kubernetes: one target per worker).
"""

from __future__ import annotations

import logging
from wsgiref.simple_server import WSGIServer

from prometheus_client import start_http_server

log = logging.getLogger(__name__)


class MetricsServer:
    def __init__(self, port: int, host: str = "0.0.0.0") -> None:
        self._server: WSGIServer | None = None
        if port:
            self._server, _ = start_http_server(port, addr=host)
            log.info("worker metrics on http://%s:%d/metrics", host, port)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
