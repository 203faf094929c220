"""``oss-responses``: its commands run what the ``python -m`` entry points run, with the same settings."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
from sqlalchemy import text
from support.servers import free_port

from oss_responses.cli import build_parser, main
from oss_responses.storage import Database
from oss_responses.storage.__main__ import main as storage_main
from oss_responses.storage.migrations import current_revision, head_revision

REPO = Path(__file__).resolve().parents[1]


def doctor(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {key: value for key, value in os.environ.items() if not key.startswith("OSS_RESPONSES_")}
    return subprocess.run([sys.executable, "-m", "oss_responses", "doctor"], env=clean | env, cwd=REPO,
                          capture_output=True, text=True, timeout=60, check=False)


def test_parser_lists_every_command() -> None:
    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]

    assert set(commands) == {"api", "worker", "migrate", "keys", "doctor", "mcp-demo"}


def test_migrate_upgrades_database_to_head(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'var' / 'db.sqlite'}"

    assert main(["migrate", "--url", url]) == 0

    assert current_revision(url) == head_revision()
    assert capsys.readouterr().out.strip().endswith(f"at revision {head_revision()}")


def test_migrate_database_of_newer_release_leaves_it_and_succeeds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A rollback: Alembic refused the revision it could not locate (exit 2), and a deployment that runs
    migrate before its API and workers did not start the previous release."""
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    assert main(["migrate", "--url", url]) == 0
    newer = f"{int(head_revision() or 0) + 1:04d}"
    with Database(url).session() as session:
        session.execute(text("UPDATE alembic_version SET version_num = :newer"), {"newer": newer})

    assert main(["migrate", "--url", url]) == 0

    assert current_revision(url) == newer
    assert f"at revision {newer}, newer than this release's {head_revision()}" in capsys.readouterr().out


def test_migrate_database_that_does_not_answer_says_so_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"postgresql+psycopg://nobody:secret@127.0.0.1:{free_port()}/nothing"

    assert main(["migrate", "--url", url]) == 1

    error = capsys.readouterr().err
    assert error.startswith("oss-responses migrate: postgresql+psycopg://nobody:***@127.0.0.1:")
    assert "did not answer" in error and "Traceback" not in error and "secret" not in error


def test_migrate_sqlite_file_whose_folder_cannot_be_made_says_so_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A SQLite path through a file (or on a read-only filesystem): the folder's mkdir ended migrate, and the
    API's and the worker's starts, in a traceback."""
    (tmp_path / "volume").write_text("a file, not a folder")
    url = f"sqlite:///{tmp_path / 'volume' / 'db.sqlite'}"

    assert main(["migrate", "--url", url]) == 1

    error = capsys.readouterr().err
    assert error.startswith(f"oss-responses migrate: {url} did not answer: unable to open database file")


@pytest.mark.parametrize("url", ["nonsense", "foo://bar"])
def test_migrate_url_that_is_no_database_url_is_usage_error(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["migrate", "--url", url])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert "argument --url: " in error and "Traceback" not in error


@pytest.mark.parametrize("url", ["nonsense", "foo://bar"])
def test_storage_migrate_url_that_is_no_database_url_is_usage_error(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``python -m oss_responses.storage migrate``, the same command (README): it ended in SQLAlchemy's traceback."""
    with pytest.raises(SystemExit) as exited:
        storage_main(["migrate", "--url", url])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert "argument --url: " in error and "Traceback" not in error


def test_migrate_unknown_revision_is_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["migrate", "--url", f"sqlite:///{tmp_path / 'db.sqlite'}", "--revision", "9999"]) == 2
    assert capsys.readouterr().err == "oss-responses migrate: Can't locate revision identified by '9999'\n"


def test_migrate_to_older_revision_says_it_does_not_downgrade(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    main(["migrate", "--url", url])

    assert main(["migrate", "--url", url, "--revision", "0003"]) == 0

    assert capsys.readouterr().out.strip().endswith(f"at revision {head_revision()} (past 0003: not downgraded)")


def test_keys_says_not_available_without_keys_module(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "oss_responses.keys.cli", None)  # as if this build had no keys

    assert main(["keys", "list"]) == 2
    assert "not available in this build" in capsys.readouterr().err


def test_keys_hands_its_arguments_to_keys_cli(monkeypatch: pytest.MonkeyPatch) -> None:
    received: list[list[str] | None] = []
    keys_cli = types.ModuleType("oss_responses.keys.cli")
    keys_cli.main = lambda argv: received.append(argv) or 0  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "oss_responses.keys.cli", keys_cli)

    assert main(["keys", "create", "--name", "ci"]) == 0
    assert received == [["create", "--name", "ci"]]


def test_mcp_demo_refuses_unknown_server(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["mcp-demo", "weather"]) == 2
    assert "calculator,documents" in capsys.readouterr().err


def test_doctor_exits_zero_with_warnings_only(database_url: str, redis_url: str, tmp_path: Path) -> None:
    result = doctor({"OSS_RESPONSES_DATABASE_URL": database_url, "OSS_RESPONSES_REDIS_URL": redis_url,
                     "OSS_RESPONSES_TIKTOKEN_DIR": str(tmp_path / "tiktoken"),
                     "OSS_RESPONSES_MODELS": '["gpt-oss-nobody-serves"]'})

    assert result.returncode == 0, result.stdout + result.stderr
    statuses = [line.split()[0] for line in result.stdout.splitlines()]
    connections = ["ok"] if database_url.startswith("postgresql") else []  # its max_connections: SQLite has none
    # No AOF on the test Redis; no encryption key; no worker for the model; this host's clock is Redis's.
    assert statuses == ["warn", "ok", *connections, "ok", "ok", "ok", "warn", "warn", "ok"]


def test_doctor_exits_nonzero_on_failed_check(tmp_path: Path) -> None:
    result = doctor({"OSS_RESPONSES_DATABASE_URL": f"sqlite:///{tmp_path / 'missing.db'}",
                     "OSS_RESPONSES_REDIS_URL": "redis://127.0.0.1:1/0",
                     "OSS_RESPONSES_TIKTOKEN_DIR": str(tmp_path / "tiktoken")})

    assert result.returncode == 1
    assert result.stdout.startswith("FAIL redis: redis://127.0.0.1:1/0 does not answer")
    assert "FAIL database:" in result.stdout
