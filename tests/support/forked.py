"""The service's commands (and the tests' MCP servers) forked from a process that has already imported
them, for the tests.

``python -m oss_responses.workers`` took 3.1-3.3 s of CPU to report ready and ``python -m
oss_responses.api`` 2.4-2.5 s, most of it imports (the openai package's types, the MCP SDK, SQLAlchemy,
Celery); one run of the suite started 84 workers and 43 API processes, over a third of its CPU on two
cores (process accounting, 2026-12-02). multiprocessing's forkserver imports the commands' modules once
per test process and forks each command from it: 1.1-1.2 s (worker) and 0.5-0.7 s (API) to ready (three
alternated pairs on an idle machine, each process's CPU once it reported ready).

From the fork on, the child runs what ``python -m MODULE`` runs, ``MODULE.__main__.main()``, with the
test's environment, working folder, log file, arguments and open-files limit; only the interpreter and
the imported modules are shared. That holds because the service reads its settings in ``main``, never at
import; what else the environment might change at import is guarded: a command whose environment differs
from the server's in anything but ``OSS_RESPONSES_*`` and ``_RUN_TIME``'s variables is executed afresh
(:func:`can_fork`), as are the tests of the commands themselves (``fork=False`` in ``test_main.py`` and
``test_celery_worker.py``), the vLLM workers and the benches. Libraries that set variables in a test
process's environment (vLLM's engine start, LiteLLM) have them taken back (:mod:`support.environ`):
left there, they made every later start in that process an executed one (39 of ~130 in one run).

The MCP servers the tests start (:mod:`support.mcp`) are forked the same way: the demo servers' modules
are imported with the commands', and a script of the tests' own (``tests/tools/misbehaving_server.py``)
runs from its path on the same imports; executed, one took 1.4-1.5 s of CPU to listen, forked 0.23-0.28 s.

A forked process is not the test's child but the server's: :class:`ForkedProcess` gives it the part of
``subprocess.Popen``'s interface the tests use (the server reports its exit status). It is not a daemon
(a worker starts a child process to tokenise a large prompt, which a daemon may not), so multiprocessing
would wait for it when its test process exits: one that a failed test left running is stopped then.
"""

from __future__ import annotations

import atexit
import importlib
import multiprocessing
import multiprocessing.forkserver
import os
import resource
import runpy
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from oss_responses.config import Settings
from support import REPO

_PREFIX = Settings.model_config["env_prefix"]
# Variables that change while the tests run and that no import reads: pytest's name of the running test,
# and the vocabulary's folder, which the service sets itself at start (``vocab.ensure_vocabulary``), as do
# the tests that load the vocabulary in their own process.
_RUN_TIME = frozenset({"PYTEST_CURRENT_TEST", "TIKTOKEN_ENCODINGS_BASE"})
COMMANDS = ("oss_responses.workers", "oss_responses.api")  # what the server imports (their __main__ modules)
# The demo MCP servers' modules, imported by the server too: ``python -m`` one of them, or a script of
# the tests' own built on the same SDK (tests/tools/misbehaving_server.py), is forked as well.
MCP_SERVERS = ("oss_responses.tools.servers.calculator", "oss_responses.tools.servers.documents")
PRELOAD = "support.forkserver_preload"  # the commands' start-up work that is the same for every child

_lock = threading.Lock()
_context: multiprocessing.context.ForkServerContext | None = None
_server_environ: dict[str, str] = {}  # the environment the server imported the commands with
_started: list[ForkedProcess] = []


def _server() -> multiprocessing.context.ForkServerContext:
    global _context
    with _lock:
        if _context is None:
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload([f"{module}.__main__" for module in COMMANDS] + [*MCP_SERVERS, PRELOAD])
            multiprocessing.forkserver.ensure_running()  # now, with the environment it is compared with
            _server_environ.update(os.environ)
            # registered after multiprocessing's handler, which waits for its children, so it runs first
            atexit.register(_stop_left_running)
            _context = context
        return _context


def can_fork(module: str, env: dict[str, str]) -> bool:
    """Whether ``module``'s command may be forked with ``env`` rather than executed afresh."""
    if module not in COMMANDS:
        return False
    _server()
    return _outside_settings(env) == _outside_settings(_server_environ)


def can_fork_program(env: dict[str, str]) -> bool:
    """Whether ``python *program`` (any module or script) may be forked with ``env``: the same test, the
    same environment as the server's outside the service's settings, ``PYTHONPATH`` aside (the server
    already has the checkout on its path)."""
    _server()
    return _outside_settings(env, "PYTHONPATH") == _outside_settings(_server_environ, "PYTHONPATH")


def _outside_settings(env: dict[str, str], *ignored: str) -> dict[str, str]:
    return {name: value for name, value in env.items()
            if not name.startswith(_PREFIX) and name not in _RUN_TIME and name not in ignored}


class ForkedProcess:
    """A forked ``python *program *argv`` (``program``: ``("-m", module)`` or ``(script,)``), with
    ``subprocess.Popen``'s ``pid``, ``returncode``, ``poll``, ``wait``, ``send_signal``, ``terminate``
    and ``kill``."""

    def __init__(self, program: Sequence[str], argv: list[str], env: dict[str, str], log_path: Path | str,
                 open_files: int | None = None) -> None:
        self.args = [sys.executable, *program, *argv]
        self._process = _server().Process(
            target=_run, args=(tuple(program), argv, env, str(log_path), open_files), name=program[-1]
        )
        self._process.start()
        assert self._process.pid is not None
        self.pid: int = self._process.pid
        _started[:] = [process for process in _started if process.poll() is None] + [self]

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if (code := self._process.exitcode) is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return code

    def send_signal(self, sig: int) -> None:
        if self._process.exitcode is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _stop_left_running() -> None:
    from support.processes import stop_process  # here: support.processes imports this module

    for process in _started:
        stop_process(process)


def lower_open_files(limit: int) -> None:
    """This process's soft open-files limit set to ``limit`` (the hard one kept)."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))


def _run(
    program: tuple[str, ...], argv: list[str], env: dict[str, str], log_path: str, open_files: int | None
) -> None:
    """In the forked child: become ``python *program *argv`` as ``subprocess.Popen`` would start it."""
    os.environ.clear()
    os.environ.update(env)
    os.chdir(REPO)
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    if open_files is not None:
        lower_open_files(open_files)
    try:
        _main(program, argv)
    finally:
        # multiprocessing ends its children with os._exit, past the atexit handlers an interpreter runs
        atexit._run_exitfuncs()


def _main(program: tuple[str, ...], argv: list[str]) -> None:
    if program[0] != "-m":  # a script
        sys.argv = [program[0], *argv]
        runpy.run_path(program[0], run_name="__main__")
        return
    module = program[1]
    sys.argv = [module, *argv]
    if module in COMMANDS:  # its __main__ module is the server's, imported: only its main() runs here
        importlib.import_module(f"{module}.__main__").main()
    else:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
