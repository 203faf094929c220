"""Running Codex CLI (``@openai/codex``, installed by scripts/bootstrap.sh into .tools/) against the
service: a CODEX_HOME whose config.toml names the service as a Responses provider, and ``codex exec``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from support import MODEL, REPO
from support.node import missing_node, with_node

LOCAL_CODEX = REPO / ".tools" / "bin" / "codex"
EXEC_TIMEOUT_S = 120.0

# The README's configuration, but with sandbox_mode danger-full-access (Codex's read-only sandbox
# needs bubblewrap and user namespaces, which CI containers may lack, and the only command these
# tests make it run is an `echo`) and no analytics (they would leave for OpenAI from CI).
CONFIG = """\
model = "{model}"
model_provider = "oss"
approval_policy = "never"
sandbox_mode = "danger-full-access"
model_context_window = 131072

[model_providers.oss]
name = "oss-responses"
base_url = "{base_url}"
wire_api = "responses"
supports_websockets = {websockets}

[analytics]
enabled = false
"""


def missing_codex() -> str | None:
    """Why Codex cannot run here, or None when it can."""
    if (reason := missing_node()) is not None:
        return reason
    if codex_binary() is None:
        return "Codex CLI is not installed (scripts/bootstrap.sh installs @openai/codex into .tools/)"
    return None


def codex_binary() -> Path | None:
    if LOCAL_CODEX.exists():
        return LOCAL_CODEX
    found = shutil.which("codex")
    return Path(found) if found else None


def write_codex_home(home: Path, base_url: str, *, websockets: bool = False) -> Path:
    """A CODEX_HOME for the service; ``websockets``: Codex talks to it over the Responses WebSocket."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(CONFIG.format(model=MODEL, base_url=base_url, websockets=str(websockets).lower()))
    return home


# What Codex prints when it could not use the Responses WebSocket and went on over HTTP.
WEBSOCKET_FAILURES = ("Falling back from WebSockets", "failed to connect to Responses WebSocket")


def codex_exec(
    home: Path, workdir: Path, prompt: str, *, resume: bool = False, options: Sequence[str] = ()
) -> subprocess.CompletedProcess[str]:
    """``codex exec`` of one prompt (``resume``: as the next turn of the last session in ``home``;
    ``options``: more of exec's flags); stdin closed, or Codex waits to read more of the prompt from it."""
    binary = codex_binary()
    assert binary is not None
    env = with_node({k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "CODEX_"))})
    env["CODEX_HOME"] = str(home)
    command = [str(binary), "exec", "--skip-git-repo-check", *options,
               *(["resume", "--last"] if resume else []), prompt]
    return subprocess.run(command, cwd=workdir, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=EXEC_TIMEOUT_S)
