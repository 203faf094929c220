"""Running JavaScript clients (the Agents SDK ``@openai/agents``, the Vercel AI SDK ``ai`` with
``@ai-sdk/openai``; scripts/bootstrap.sh installs them into .tools/) against the service: one node process
per run of a script beside this module, its scenario given as JSON."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from support import MODEL, REPO
from support.node import missing_node, node

# Each folder one set of pinned packages (scripts/bootstrap.sh): the Agents SDK with the Vercel AI SDK 6,
# and the Vercel AI SDK 7.
PACKAGES = REPO / ".tools" / "js-clients"
AI_SDK_7_PACKAGES = REPO / ".tools" / "js-clients-ai7"
RUN_TIMEOUT_S = 60.0


def missing_js_client(package: str, packages: Path = PACKAGES) -> str | None:
    """Why ``package`` cannot run from ``packages`` here, or None when it can."""
    if (reason := missing_node()) is not None:
        return reason
    if not (packages / "node_modules" / package).is_dir():
        return f"{package} is not installed (scripts/bootstrap.sh installs it into {packages.relative_to(REPO)})"
    return None


def run_js(script: str, base_url: str, *, packages: Path = PACKAGES, **scenario: Any) -> dict[str, Any]:
    """Run ``script`` (a file name in tests/support) on the packages in ``packages`` with the scenario in
    ``JS_SCENARIO`` (``base_url`` and ``model`` added); the JSON object it prints last."""
    env = os.environ | {"JS_SCENARIO": json.dumps({"base_url": base_url, "model": MODEL} | scenario)}
    # A module read from stdin resolves its imports from the working directory: the installed packages.
    source = Path(__file__).with_name(script).read_text()
    done = subprocess.run([str(node()), "--input-type=module", "-"], input=source, cwd=packages, env=env,
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert done.returncode == 0, f"node exited {done.returncode}\n{done.stderr[-3000:]}"
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result
