"""Running JavaScript clients (the Agents SDK ``@openai/agents``, the Vercel AI SDK ``ai`` with
``@ai-sdk/openai``; scripts/bootstrap.sh installs them into .tools/js-clients) against the service:
one node process per run of a script beside this module, its scenario given as JSON."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from support import MODEL, REPO

PACKAGES = REPO / ".tools" / "js-clients"
RUN_TIMEOUT_S = 60.0


def missing_js_client(package: str) -> str | None:
    """Why ``package`` cannot run here, or None when it can."""
    if shutil.which("node") is None:
        return "node is not installed (scripts/bootstrap.sh installs nodejs and npm from apt)"
    if not (PACKAGES / "node_modules" / package).is_dir():
        return f"{package} is not installed (scripts/bootstrap.sh installs it into .tools/js-clients)"
    return None


def run_js(script: str, base_url: str, **scenario: Any) -> dict[str, Any]:
    """Run ``script`` (a file name in tests/support) with the scenario in ``JS_SCENARIO`` (``base_url``
    and ``model`` added); the JSON object it prints last."""
    env = os.environ | {"JS_SCENARIO": json.dumps({"base_url": base_url, "model": MODEL} | scenario)}
    # A module read from stdin resolves its imports from the working directory: the installed packages.
    source = Path(__file__).with_name(script).read_text()
    done = subprocess.run(["node", *_websocket_flag(), "--input-type=module", "-"], input=source, cwd=PACKAGES, env=env,
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert done.returncode == 0, f"node exited {done.returncode}\n{done.stderr[-3000:]}"
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _websocket_flag() -> list[str]:
    """Node's flag for its global ``WebSocket`` (the Agents SDK's websocket transport uses it): needed
    before Node 22, which has it by default."""
    version = subprocess.run(["node", "--version"], capture_output=True, text=True, check=True).stdout
    return ["--experimental-websocket"] if int(version.lstrip("v").split(".")[0]) < 22 else []
