"""``python -m oss_responses.webhooks list``: the delivery log as operators read it."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from oss_responses.storage import Database, utcnow
from oss_responses.storage.webhook_deliveries import (
    add_pending,
    list_deliveries,
    record_attempt,
)
from oss_responses.webhooks.__main__ import main

URL = "https://hooks.example/receive"


@pytest.fixture
def db(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Database]:
    monkeypatch.setenv("OSS_RESPONSES_DATABASE_URL", database_url)
    from oss_responses.config import get_settings

    get_settings.cache_clear()
    database = Database(database_url)
    database.run(add_pending, [("evt_ok", URL, "response.completed", "resp_ok", utcnow()),
                               ("evt_bad", URL, "response.failed", "resp_bad", utcnow())])
    database.run(record_attempt, "evt_ok", URL, state="delivered", status=200, error=None)
    database.run(record_attempt, "evt_bad", URL, state="retrying", status=503, error="HTTP 503: busy")
    yield database
    database.dispose()
    get_settings.cache_clear()


def test_add_pending_twice_keeps_one_row(db: Database) -> None:
    db.run(add_pending, [("evt_ok", URL, "response.completed", "resp_ok", utcnow())])
    [record] = db.run(list_deliveries, response_id="resp_ok")
    assert (record.state, record.attempts) == ("delivered", 1)


def test_list_failed_deliveries(db: Database, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "--failed"]) == 0
    [line] = capsys.readouterr().out.splitlines()
    assert line.startswith("evt_bad response.failed resp_bad retrying attempts=1 status=503")
    assert line.endswith("error=HTTP 503: busy")


def test_list_deliveries_of_response_as_json(db: Database, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "--response", "resp_ok", "--json"]) == 0
    [line] = capsys.readouterr().out.splitlines()
    record = json.loads(line)
    assert (record["webhook_id"], record["state"], record["last_status"]) == ("evt_ok", "delivered", 200)
    assert record["delivered_at"] is not None


def test_list_on_missing_database_says_so_and_creates_nothing(
    tmp_path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:  # type: ignore[no-untyped-def]
    from oss_responses.config import get_settings

    missing = tmp_path / "missing.db"
    monkeypatch.setenv("OSS_RESPONSES_DATABASE_URL", f"sqlite:///{missing}")
    get_settings.cache_clear()
    try:
        assert main(["list"]) == 2
    finally:
        get_settings.cache_clear()
    assert "no such file; run `oss-responses migrate`" in capsys.readouterr().err  # was a traceback
    assert not missing.exists()


@pytest.mark.parametrize("limit", ["0", "-1"])
def test_list_with_limit_below_one_is_refused(db: Database, limit: str) -> None:
    with pytest.raises(SystemExit) as refused:
        main(["list", "--limit", limit])  # -1 listed every row
    assert refused.value.code == 2
