"""README.md stays true: its configuration table lists every setting, and its commands exist."""

from __future__ import annotations

import re
from pathlib import Path

from oss_responses.config import Settings

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()
MAKEFILE = (Path(__file__).resolve().parents[1] / "Makefile").read_text()


def test_readme_lists_every_setting() -> None:
    missing = [name for name in Settings.model_fields if f"`OSS_RESPONSES_{name.upper()}`" not in README]
    assert missing == []


def test_readme_commands_are_make_targets() -> None:
    for target in ("run", "test", "lint", "fuzz"):
        assert f"`make {target}`" in README
        assert f"\n{target}:" in MAKEFILE


def test_make_test_runs_lint_first() -> None:
    assert re.search(r"^test: lint$", MAKEFILE, re.MULTILINE)
    lint = MAKEFILE.split("\nlint:", 1)[1].split("\n\n", 1)[0]
    assert "ruff check ." in lint and "mypy oss_responses" in lint


def test_readme_oss_responses_commands_exist() -> None:
    from oss_responses.cli import build_parser

    commands = set(build_parser()._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
    named = set(re.findall(r"oss-responses (\w[\w-]*)", README))
    assert named and named <= commands
