"""The error handlers on their own: an unexpected exception is a logged 500 in OpenAI's shape."""

from __future__ import annotations

import logging
from pathlib import Path

import anyio
import httpx2
import pytest
from fastapi import FastAPI
from sqlalchemy import text
from support.sqlite_refusals import fill, full_database

from oss_responses.api.errors import install_error_handlers
from oss_responses.errors import Conflict
from oss_responses.storage import Database, migrate


def _app(tmp_path: Path | None = None) -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)

    @app.post("/fill")
    def fill_disk() -> None:
        assert tmp_path is not None
        db = full_database(tmp_path / "full.db")
        try:
            fill(db)
        finally:
            db.dispose()

    @app.get("/pool")
    def pool_timed_out() -> None:
        assert tmp_path is not None
        url = f"sqlite:///{tmp_path / 'pool.db'}"
        migrate(url)
        db = Database(url, pool_size=1, max_overflow=0, pool_timeout=0.1)
        try:
            with db.engine.connect():  # the pool's one connection busy (a request waiting on a lock)
                db.run(lambda session: session.execute(text("SELECT 1")))
        finally:
            db.dispose()

    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError("secret internals")

    @app.get("/conflict")
    async def conflict() -> None:
        raise Conflict("busy", param="x", code="busy")

    return app


def _get(path: str, method: str = "GET", tmp_path: Path | None = None) -> httpx2.Response:
    async def get() -> httpx2.Response:
        transport = httpx2.ASGITransport(app=_app(tmp_path), raise_app_exceptions=False)
        async with httpx2.AsyncClient(transport=transport, base_url="http://api") as client:
            return await client.request(method, path)

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


def test_write_on_full_sqlite_disk_is_503_saying_writes_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """SQLITE_FULL: the database answered, and refuses writes until its disk has room; it was told as
    "cannot reach its database", which sent its operator to look for a network fault."""
    with caplog.at_level(logging.WARNING):
        response = _get("/fill", "POST", tmp_path)
    assert response.status_code == 503
    assert response.json()["error"] == {
        "message": "The service's database is refusing writes right now (disk full). Retry shortly.",
        "type": "server_error", "param": None, "code": "database_unavailable",
    }
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == ["database refusing writes"]
    assert not any(r.exc_info for r in caplog.records)


def test_pool_timed_out_is_503_saying_database_busy(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Every pooled connection busy past the pool's 30 s wait (requests held by a lock, more of them than the
    pool): the database answers, so "cannot reach its database" (and a log line saying "unreachable") sent its
    operator to look for a network fault, as a lock_timeout had."""
    with caplog.at_level(logging.WARNING):
        response = _get("/pool", tmp_path=tmp_path)
    assert response.status_code == 503
    error = response.json()["error"]
    assert error["code"] == "database_unavailable" and "too busy" in error["message"]
    assert [r.getMessage().split(" on ")[0] for r in caplog.records] == ["database timed out"]
