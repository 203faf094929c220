"""The openai SDK's view of a response: polled until it ended, and its output items without what the
SDK's stream accumulator adds (so they compare with ours)."""

from __future__ import annotations

import ssl
import time
from functools import cache
from typing import Any

import httpx2
from openai import AsyncOpenAI, DefaultAsyncHttpxClient, DefaultHttpxClient, OpenAI
from openai.types.responses import Response

from oss_responses.statuses import ACTIVE_STATUSES
from oss_responses.storage import Database, get_response

_SDK_ONLY_KEYS = ("parsed", "parsed_arguments")
POLL_S = 0.02


@cache
def _tls() -> ssl.SSLContext:
    """The TLS context of the tests' clients, which talk plain HTTP: httpx builds one per client otherwise,
    loading the system's CA certificates into it (~20 ms of CPU, paid by most tests once or more)."""
    return ssl.create_default_context()


def sdk_client(base_url: str, api_key: str = "test", **options: Any) -> OpenAI:
    """The official SDK's client of ``base_url`` (``.../v1``); ``options`` as ``OpenAI``'s (``timeout``...)."""
    return OpenAI(base_url=base_url, api_key=api_key, http_client=DefaultHttpxClient(verify=_tls()), **options)


def async_sdk_client(base_url: str, api_key: str = "test", **options: Any) -> AsyncOpenAI:
    """:func:`sdk_client`, asynchronous."""
    return AsyncOpenAI(base_url=base_url, api_key=api_key, http_client=DefaultAsyncHttpxClient(verify=_tls()),
                       **options)


def http_client(**options: Any) -> httpx2.Client:
    """A raw ``httpx2`` client (``base_url``, ``timeout``, ``headers``...) for what the SDK would never send."""
    return httpx2.Client(verify=_tls(), **options)


def wait_ended(client: OpenAI, response_id: str, timeout: float = 20.0) -> Response:
    """``GET /v1/responses/{id}`` until the response left queued/in_progress; it, as retrieved then."""
    deadline = time.monotonic() + timeout
    while (response := client.responses.retrieve(response_id)).status in ACTIVE_STATUSES:
        assert time.monotonic() < deadline, f"{response_id} still {response.status}"
        time.sleep(POLL_S)
    return response


def without_parsed(value: Any) -> Any:
    """``value`` (an item's ``to_dict()``) without the SDK's ``parsed``/``parsed_arguments`` keys."""
    if isinstance(value, dict):
        return {k: without_parsed(v) for k, v in value.items() if k not in _SDK_ONLY_KEYS}
    if isinstance(value, list):
        return [without_parsed(v) for v in value]
    return value


def end_queued(client: OpenAI, db: Database, response_id: str, verb: str) -> None:
    """A queued response ended by ``verb``, as a client asks it: "cancel" (cancelled, in SQL too) or "delete"
    (gone from SQL)."""
    if verb == "cancel":
        assert client.responses.cancel(response_id).status == "cancelled"
        assert db.run(get_response, response_id).status == "cancelled"  # type: ignore[union-attr]
    else:
        assert client.responses.delete(response_id) is None  # type: ignore[func-returns-value]
        assert db.run(get_response, response_id) is None
