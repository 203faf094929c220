"""``make run``: the whole stack on one machine with embedded defaults.

A local redis-server (started here unless ``OSS_RESPONSES_REDIS_URL`` already answers), a SQLite
file, one worker with the scripted engine (unless ``OSS_RESPONSES_ENGINE`` says otherwise) and the
API on ``OSS_RESPONSES_API_HOST:OSS_RESPONSES_API_PORT``. Ctrl-C stops everything.

Unless ``OSS_RESPONSES_TOOL_SERVERS`` is set (``{}``: none), the two demo MCP servers start too, as in
docker-compose.yml: the calculator behind ``code_interpreter`` and the documents server behind
``web_search_preview`` (and so ``web_search``), since Codex CLI sends a ``web_search`` tool with
every request and the service refuses one it has no backend for.

Unless ``OSS_RESPONSES_ENCRYPTION_KEYS`` is set, both get a key made once and kept in
``var/encryption-key``, so store=false clients (Codex CLI) work out of the box and their replayed
reasoning still opens after a restart.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

import redis

from oss_responses.config import Settings, get_settings
from oss_responses.sealing import new_key
from oss_responses.storage import migrate
from oss_responses.vocab import ensure_vocabulary


def _redis_answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=0.5).ping())
    except redis.RedisError:
        return False


def _start_redis(url: str, folder: Path) -> subprocess.Popen[bytes]:
    binary = shutil.which("redis-server")
    if binary is None:
        sys.exit("redis-server not found: install it (apt-get install redis-server) or set OSS_RESPONSES_REDIS_URL")
    folder.mkdir(parents=True, exist_ok=True)
    port = str(urlparse(url).port or 6379)
    proc = subprocess.Popen(
        # AOF (in var/redis), as in docker-compose.yml: queued tasks and running responses' journals
        # survive a restart of the stack.
        [binary, "--port", port, "--bind", "127.0.0.1", "--dir", str(folder), "--save", "",
         "--appendonly", "yes", "--appendfsync", "everysec", "--maxmemory-policy", "noeviction"],
        stdout=subprocess.DEVNULL, process_group=0,
    )
    deadline = time.monotonic() + 10
    while not _redis_answers(url):
        if time.monotonic() > deadline or proc.poll() is not None:
            sys.exit(f"redis-server did not start on {url}")
        time.sleep(0.05)
    return proc


# As in docker-compose.yml.
DEMO_TOOL_SERVERS = {"code_interpreter": ("calculator", 8811), "web_search_preview": ("documents", 8812)}


def _port_answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    except OSError:
        return False
    return True


def _start_demo_tool_servers(procs: list[subprocess.Popen[bytes]]) -> str:
    """The JSON for OSS_RESPONSES_TOOL_SERVERS, the demo servers started (or found already listening)."""
    for name, port in DEMO_TOOL_SERVERS.values():
        if not _port_answers(port):
            procs.append(subprocess.Popen(
                [sys.executable, "-m", f"oss_responses.tools.servers.{name}", "--port", str(port)],
                stdout=subprocess.DEVNULL, process_group=0,
            ))
    deadline = time.monotonic() + 20
    while not all(_port_answers(port) for _, port in DEMO_TOOL_SERVERS.values()):
        if time.monotonic() > deadline:
            sys.exit(f"the demo MCP servers did not start on ports {[p for _, p in DEMO_TOOL_SERVERS.values()]}")
        time.sleep(0.1)
    return json.dumps({label: f"http://127.0.0.1:{port}/mcp" for label, (_, port) in DEMO_TOOL_SERVERS.items()})


def _encryption_keys(var: Path) -> str:
    """The JSON list for OSS_RESPONSES_ENCRYPTION_KEYS: the local key, made on first use."""
    path = var / "encryption-key"
    if not path.exists():
        path.touch(mode=0o600)
        path.write_text(new_key())
    return json.dumps([path.read_text().strip()])


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


STOP_GRACE_SECONDS = 30.0
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def stop_all(procs: list[subprocess.Popen[bytes]], grace_seconds: float = STOP_GRACE_SECONDS) -> None:
    """Last started, first stopped, each before the next: the API and the worker still need Redis
    while they shut down. Each gets SIGTERM and ``grace_seconds``, then SIGKILL. A second Ctrl-C (or
    SIGTERM) while stopping kills what is left at once: it must not abandon the rest, running, as an
    exception out of a wait did (the demo MCP servers outlived the stack)."""
    hurry = False

    def hurry_up(signum: int, frame: object) -> None:
        nonlocal hurry
        hurry = True

    previous = {sig: signal.signal(sig, hurry_up) for sig in STOP_SIGNALS}
    try:
        for p in reversed(procs):
            if p.poll() is None and not hurry:
                p.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + grace_seconds
            while p.poll() is None and not hurry and time.monotonic() < deadline:
                time.sleep(0.05)
            if p.poll() is None:
                p.kill()
            p.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def stack_env(settings: Settings, var: Path, procs: list[subprocess.Popen[bytes]]) -> dict[str, str]:
    """The worker's and the API's environment: this one, with what the stack makes for them when it is
    unset (not empty: ``OSS_RESPONSES_TOOL_SERVERS='{}'`` is a stack without MCP servers)."""
    env = {**os.environ, "OSS_RESPONSES_WORKER_MODEL": settings.models[0]}
    env.setdefault("OSS_RESPONSES_LOG_FORMAT", "text")  # a terminal, not a log collector
    if "encryption_keys" not in settings.model_fields_set:
        env["OSS_RESPONSES_ENCRYPTION_KEYS"] = _encryption_keys(var)
    if "tool_servers" not in settings.model_fields_set:
        env["OSS_RESPONSES_TOOL_SERVERS"] = _start_demo_tool_servers(procs)
    return env


def main() -> None:
    # A SIGTERM (docker stop, a supervisor) stops the children too, as Ctrl-C does.
    signal.signal(signal.SIGTERM, _interrupt)
    settings = get_settings()
    var = Path("var")
    var.mkdir(exist_ok=True)
    procs: list[subprocess.Popen[bytes]] = []
    if not _redis_answers(settings.redis_url):
        procs.append(_start_redis(settings.redis_url, var / "redis"))
    migrate(settings.database_url)
    ensure_vocabulary(settings.tiktoken_dir)  # once, before the worker and the API both look for it
    env = stack_env(settings, var, procs)
    procs.append(subprocess.Popen([sys.executable, "-m", "oss_responses.workers"], env=env, process_group=0))
    procs.append(subprocess.Popen([sys.executable, "-m", "oss_responses.api"], env=env, process_group=0))
    print(f"oss-responses: http://{settings.api_host}:{settings.api_port}/v1 (model {settings.models[0]})", flush=True)
    try:
        while all(p.poll() is None for p in procs):
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        # The children have process groups of their own, so a Ctrl-C reaches only this process, which
        # stops them in order.
        stop_all(procs)


if __name__ == "__main__":
    main()
