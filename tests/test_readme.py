"""README.md and ARCHITECTURE.md stay true: the configuration table lists every setting, the commands exist,
the clients table names the versions the suite runs, and the module map names every module."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

from pydantic import SecretStr

from oss_responses.config import Settings

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
MAKEFILE = (ROOT / "Makefile").read_text()
ARCHITECTURE = (ROOT / "ARCHITECTURE.md").read_text()
PACKAGE = ROOT / "oss_responses"
# Described as a whole by their package's row: each migration, each demo MCP server.
DESCRIBED_AS_A_WHOLE = ("storage/migrations/versions/", "tools/servers/")


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


# The Python clients tests/clients runs (requirements-dev.txt); the JavaScript ones are pinned in scripts/bootstrap.sh.
PYTHON_CLIENTS = ("openai-agents", "langchain-openai", "pydantic-ai-slim[openai]", "litellm", "agent-framework-core",
                  "agent-framework-openai")


def test_readme_clients_table_names_pinned_versions() -> None:
    requirements = (ROOT / "requirements-dev.txt").read_text()
    bootstrap = (ROOT / "scripts" / "bootstrap.sh").read_text()
    pins = [(name, re.findall(rf"^{re.escape(name)}==(\S+)", requirements, re.MULTILINE)) for name in PYTHON_CLIENTS]
    pins.append(("@openai/codex", re.findall(r"^codex_version=(\S+)", bootstrap, re.MULTILINE)))
    js_installs = bootstrap.split("\ninstall_js_clients() {", 1)[1]
    js_pins = re.findall(r'"((?:@[\w-]+/)?[\w-]+)@([\w.-]+)"', js_installs)
    assert all(len(versions) == 1 for _, versions in pins) and len(js_pins) == 8
    clients = README.split("\n## Clients\n", 1)[1].split("\n## ", 1)[0]
    named = [f"`{name}` {version}" for name, version in [*((name, v[0]) for name, v in pins), *js_pins]]
    assert [text for text in named if text not in clients] == []


def test_readme_oss_responses_commands_exist() -> None:
    from oss_responses.cli import build_parser

    commands = set(build_parser()._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
    named = set(re.findall(r"oss-responses (\w[\w-]*)", README))
    assert named and named <= commands


def test_architecture_names_every_module() -> None:
    # A module is named by its path, or by its file name in the row of its top package (`| `storage/` |`).
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        if path.name in ("__init__.py", "__main__.py") or module.startswith(DESCRIBED_AS_A_WHOLE):
            continue
        if f"`{module}`" not in ARCHITECTURE and not re.search(rf"\b{re.escape(path.name)}\b", _rows_of(module)):
            missing.append(module)
    assert missing == []


def _rows_of(module: str) -> str:
    """The module map's rows of the module's top package (or of the top-level module itself)."""
    top = module.split("/", 1)[0] + "/" if "/" in module else module
    return "\n".join(line for line in ARCHITECTURE.splitlines() if line.startswith(f"| `{top}"))


def test_architecture_module_names_resolve() -> None:
    # A name given as its module's (`jobs.load_visible`, `run_end.finish`) is defined there, not only imported:
    # a split that moves a function moves the name in the text too. Modules sharing a file name (`responses`)
    # are left out: such dotted names are mostly a table's columns.
    modules: dict[str, list[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        dotted = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        modules.setdefault(path.stem, []).append(dotted)
    missing = []
    for module, name in re.findall(r"`([a-z_]+)\.(?!py`)([A-Za-z_]\w*)`", ARCHITECTURE):
        if len(modules.get(module, [])) != 1:
            continue
        defined = getattr(importlib.import_module(modules[module][0]), name, None)
        if defined is None or getattr(defined, "__module__", modules[module][0]) != modules[module][0]:
            missing.append(f"{module}.{name}")  # absent, or only imported there
    assert missing == []


def test_readme_configuration_defaults_are_the_settings_defaults() -> None:
    # The table's default column, read as the environment variable would be (JSON, or the bare text), is the
    # field's default: a default changed in config.py changes the table too.
    rows = re.findall(r"^\| `OSS_RESPONSES_(\w+)` \| ([^|]*?) \|", README, re.MULTILINE)
    wrong = {}
    for name, shown in rows:
        default = Settings.model_fields[name.lower()].get_default(call_default_factory=True)
        if _table_value(shown) != _comparable(default):
            wrong[name] = (shown, default)
    assert rows and wrong == {}


def _table_value(shown: str) -> object:
    text = shown.strip().strip("`")
    if text in ("unset", "(unset)"):
        return None
    try:
        return json.loads(text.replace("True", "true").replace("False", "false"))
    except ValueError:
        return text


def _comparable(default: object) -> object:
    if isinstance(default, Path):
        return str(default)
    if isinstance(default, list) and all(isinstance(value, SecretStr) for value in default):
        return [value.get_secret_value() for value in default]
    return default


def test_readme_paths_exist() -> None:
    # Every file README names by its path from the checkout's root (`tests/workers/test_takeover.py`, `bench/relay.py`,
    # `deploy/grafana/oss-responses.json`) is there, and a test it names (`path::test_name`) is defined in it.
    named = re.findall(r"\b((?:oss_responses|tests|bench|scripts|docs|deploy)/[\w/.-]*\w\.\w+)(?:::(\w+))?", README)
    missing = [f"{path}::{test}" if test else path for path, test in named
               if path != "bench/NAME.py" and not _holds(ROOT / path, test)]  # NAME: a placeholder
    assert named and missing == []


def _holds(path: Path, test: str) -> bool:
    return path.is_file() and (not test or f"def {test}(" in path.read_text())
