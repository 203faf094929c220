"""Running the Agents SDK for JavaScript (``@openai/agents``, installed by scripts/bootstrap.sh into
.tools/agents-js) against the service: one ``run`` per node process (``agents_js_run.mjs``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from support import MODEL, REPO

PACKAGES = REPO / ".tools" / "agents-js"
SCRIPT = Path(__file__).with_name("agents_js_run.mjs")
RUN_TIMEOUT_S = 60.0


def missing_agents_js() -> str | None:
    """Why the SDK cannot run here, or None when it can."""
    if shutil.which("node") is None:
        return "node is not installed (scripts/bootstrap.sh installs nodejs and npm from apt)"
    if not (PACKAGES / "node_modules" / "@openai" / "agents").is_dir():
        return "@openai/agents is not installed (scripts/bootstrap.sh installs it into .tools/agents-js)"
    return None


def run_agent(base_url: str, prompt: str, *, stream: bool = False, **scenario: Any) -> dict[str, Any]:
    """One ``run`` of an agent named speller (``tools``: with spell_backwards; ``output_type``: answers
    ``{spelling}``; ``handoff``: may hand off to an agent named helper). Its result, or its error."""
    env = os.environ | {"AGENTS_JS_SCENARIO": json.dumps(
        {"base_url": base_url, "model": MODEL, "input": prompt, "stream": stream} | scenario)}
    # A module read from stdin resolves its imports from the working directory: the installed packages.
    done = subprocess.run(["node", "--input-type=module", "-"], input=SCRIPT.read_text(), cwd=PACKAGES, env=env,
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert done.returncode == 0, f"node exited {done.returncode}\n{done.stderr[-3000:]}"
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result
