"""A webhook endpoint for tests: a real HTTP server on 127.0.0.1 that checks every delivery's Standard
Webhooks signature with the openai SDK (``client.webhooks.unwrap``), as a user's endpoint would."""

from __future__ import annotations

import base64
import secrets
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from openai import OpenAI


def new_webhook_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


@dataclass
class Delivery:
    headers: dict[str, str]
    body: bytes
    event: Any | None  # the SDK's UnwrapWebhookEvent; None when the signature did not verify
    error: str | None
    answered: int


@dataclass
class WebhookReceiver:
    """Answers 500 to the first ``fail_first`` deliveries, then 200; keeps every delivery."""

    secret: str = field(default_factory=new_webhook_secret)
    fail_first: int = 0
    deliveries: list[Delivery] = field(default_factory=list)
    url: str = ""
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> WebhookReceiver:
        receiver = self
        sdk = OpenAI(api_key="unused", base_url="http://127.0.0.1:9/v1")

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                headers = {name.lower(): value for name, value in self.headers.items()}
                try:
                    event, error = sdk.webhooks.unwrap(body, headers, secret=receiver.secret), None
                except Exception as exc:  # the SDK's InvalidWebhookSignatureError, or a bad payload
                    event, error = None, f"{type(exc).__name__}: {exc}"
                with receiver._lock:
                    failing = len(receiver.deliveries) < receiver.fail_first
                    status = 500 if failing or error else 200
                    receiver.deliveries.append(Delivery(headers, body, event, error, status))
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/webhook"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def wait_for(self, count: int, timeout: float = 30.0) -> list[Delivery]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.deliveries) >= count:
                    return list(self.deliveries)
            time.sleep(0.05)
        raise TimeoutError(f"{len(self.deliveries)} webhook deliveries, not {count}, within {timeout}s")

    def of(self, response_id: str) -> list[Delivery]:
        with self._lock:
            return [d for d in self.deliveries if d.event is not None and d.event.data.id == response_id]
