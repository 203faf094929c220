"""The error handlers on their own: an unexpected exception is a logged 500 in OpenAI's shape."""

from __future__ import annotations

import logging

import anyio
import httpx2
import pytest
from fastapi import FastAPI

from oss_responses.api.errors import install_error_handlers
from oss_responses.errors import Conflict


def _app() -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)

    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError("secret internals")

    @app.get("/conflict")
    async def conflict() -> None:
        raise Conflict("busy", param="x", code="busy")

    return app


def _get(path: str) -> httpx2.Response:
    async def get() -> httpx2.Response:
        transport = httpx2.ASGITransport(app=_app(), raise_app_exceptions=False)
        async with httpx2.AsyncClient(transport=transport, base_url="http://api") as client:
            return await client.get(path)

    return anyio.run(get)


def test_unexpected_error_is_500_without_traceback(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR):
        response = _get("/boom")
    assert response.status_code == 500
    assert response.json()["error"]["type"] == "server_error"
    assert "secret internals" not in response.text and "Traceback" not in response.text
    assert any("secret internals" in (r.exc_text or "") for r in caplog.records)


def test_service_error_keeps_its_status_and_fields() -> None:
    response = _get("/conflict")
    assert response.status_code == 409
    assert response.json() == {
        "error": {"message": "busy", "type": "invalid_request_error", "param": "x", "code": "busy"}
    }
