"""``python -m oss_responses.keys``: create, list and revoke as a subprocess, against a migrated database."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from oss_responses.keys.cli import LIST_COLUMNS, main
from oss_responses.storage import Database, find_active_key

REPO = Path(__file__).resolve().parents[2]


def _keys(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OSS_RESPONSES_")}
    env["OSS_RESPONSES_DATABASE_URL"] = database_url
    return subprocess.run([sys.executable, "-m", "oss_responses.keys", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60, check=False)


def _listed(database_url: str) -> list[dict[str, str]]:
    done = _keys(database_url, "list")
    assert done.returncode == 0, done.stderr
    header, *rows = done.stdout.splitlines()
    assert header.split("\t") == list(LIST_COLUMNS)
    return [dict(zip(LIST_COLUMNS, row.split("\t"), strict=True)) for row in rows]


def test_keys_cli_create_list_revoke_round_trip(database_url: str) -> None:
    created = _keys(database_url, "create", "--owner", "acme", "--models", "gpt-oss-20b,gpt-oss-120b",
                    "--max-background", "4")
    assert created.returncode == 0, created.stderr
    secret = created.stdout.strip()
    assert secret.startswith("sk-") and "\n" not in secret

    [listed] = _listed(database_url)
    assert (listed["owner"], listed["models"], listed["max_background"], listed["revoked_at"]) == (
        "acme", "gpt-oss-20b,gpt-oss-120b", "4", "-")
    assert listed["id"] in created.stderr
    assert secret not in _keys(database_url, "list").stdout

    database = Database(database_url)
    try:
        assert database.run(find_active_key, secret).owner == "acme"  # type: ignore[union-attr]
        revoked = _keys(database_url, "revoke", listed["id"])
        assert revoked.returncode == 0, revoked.stderr
        assert database.run(find_active_key, secret) is None
    finally:
        database.dispose()
    assert _listed(database_url)[0]["revoked_at"] != "-"


def test_keys_cli_revoke_unknown_key_fails(database_url: str) -> None:
    done = _keys(database_url, "revoke", "key_unknown")
    assert done.returncode == 1 and "key_unknown" in done.stderr


def test_keys_cli_main_returns_exit_status_in_process(database_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--url", database_url, "create", "--owner", "acme"]) == 0
    secret = capsys.readouterr().out.strip()
    assert main(["--url", database_url, "list"]) == 0
    assert "acme" in capsys.readouterr().out and secret.startswith("sk-")


def test_keys_cli_on_missing_database_says_so_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing.db"
    assert main(["--url", f"sqlite:///{missing}", "list"]) == 2
    assert "no such file; run `oss-responses migrate`" in capsys.readouterr().err  # was a traceback
    assert not missing.exists()


def test_keys_cli_on_unmigrated_database_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.db"
    Database(f"sqlite:///{empty}").dispose()
    empty.touch()
    assert main(["--url", f"sqlite:///{empty}", "create", "--owner", "acme"]) == 2
    assert "is not migrated" in capsys.readouterr().err


def test_keys_cli_imports_neither_engine_nor_protocol_modules() -> None:
    """``keys`` asks the doctor's database check only: through the doctor's package it imported every check's
    modules (the engine's, the MCP client's, the openai types), ~2.8 s of a 3.3 s start."""
    heavy = ("openai", "mcp", "oss_responses.engine", "oss_responses.tools", "oss_responses.doctor.runtime")
    probe = f"import sys, oss_responses.keys.cli; print(sorted(m for m in sys.modules if m.startswith({heavy!r})))"
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60,
                          check=True)
    assert done.stdout.strip() == "[]"
