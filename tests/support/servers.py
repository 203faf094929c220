"""Real redis-server and PostgreSQL processes for tests, each in its own temporary directory.

Both listen on a free loopback port (never 6379 / 5432), are stopped by ``stop()``, and die with the
test process even when it is killed (parent-death signal), so no server outlives a run. PostgreSQL
refuses to run as root, so as root the cluster belongs to the ``postgres`` user.
"""

from __future__ import annotations

import ctypes
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
import redis

if TYPE_CHECKING:
    from support.forked import ForkedProcess

PG_BIN = Path(os.environ.get("OSS_RESPONSES_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))
# Every test's bound on a process or server starting: a hang, not a slow start (make test runs three test
# processes on two cores, where an API process took 14 s to start and a supervised pair over 20).
START_TIMEOUT_S = 60.0
_PR_SET_PDEATHSIG = 1


def _dying_with_parent(sig: signal.Signals) -> Callable[[], None]:
    """A ``preexec_fn`` (runs after the uid switch, which would clear it) asking for ``sig`` on orphaning."""
    parent = os.getpid()

    def preexec() -> None:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, sig)
        if os.getppid() != parent:
            os.kill(os.getpid(), sig)

    return preexec


def _make_directory(prefix: str) -> Path:
    """A fresh temp dir marked with our pid; dirs of dead test processes (killed runs) are removed."""
    for stale in Path(tempfile.gettempdir()).glob(f"{prefix}*"):
        try:
            os.kill(int((stale / "owner.pid").read_text()), 0)
        except ProcessLookupError:
            shutil.rmtree(stale, ignore_errors=True)
        except (OSError, ValueError):
            pass  # not ours to judge (no pid file yet, or unreadable)
    directory = Path(tempfile.mkdtemp(prefix=prefix))
    (directory / "owner.pid").write_text(str(os.getpid()))
    return directory


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen[bytes] | ForkedProcess, what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise TimeoutError(f"{what} did not listen on {port} within {START_TIMEOUT_S}s")


@dataclass
class RedisServer:
    port: int
    directory: Path
    process: subprocess.Popen[bytes]
    args: list[str] = field(default_factory=list)

    def kill(self) -> None:
        """SIGKILL: what a crash or an OOM kill does (an AOF keeps what was fsynced)."""
        self.process.kill()
        self.process.wait()

    def restart(self) -> None:
        """Start it again on the same port and folder; returns once it has reloaded its AOF (if any)."""
        self.process = _spawn_redis(self.args)
        wait_for_port(self.port, self.process, "redis-server")
        _wait_until_loaded(self.port)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)


def start_redis(*, appendonly: bool = False) -> RedisServer:
    """A redis-server of our own; ``appendonly``: with AOF, fsync always (a restart loses nothing).

    ``$REDIS_SERVER_BINARY`` names another server binary (a newer Redis, or Valkey) for a bench to
    compare; by default it is the ``redis-server`` on PATH (Debian's, which the tests use).
    """
    binary = os.environ.get("REDIS_SERVER_BINARY") or shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server not found: apt-get install -y redis-server")
    directory = _make_directory("oss-redis-")
    port = free_port()
    persistence = ["--appendonly", "yes", "--appendfsync", "always"] if appendonly else ["--appendonly", "no"]
    args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory),
            "--save", "", *persistence, "--daemonize", "no", "--loglevel", "warning",
            "--logfile", str(directory / "redis.log")]
    process = _spawn_redis(args)
    wait_for_port(port, process, "redis-server")
    return RedisServer(port=port, directory=directory, process=process, args=args)


def _wait_until_loaded(port: int) -> None:
    """Until the server answers commands (while it loads its AOF it answers LOADING errors)."""
    client = redis.Redis(port=port, socket_timeout=2)
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while True:
            try:
                client.ping()
                return
            except redis.BusyLoadingError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
    finally:
        client.close()


def _spawn_redis(args: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=_dying_with_parent(signal.SIGTERM))


def _owner_options() -> dict[str, object]:
    """Popen arguments that run a PostgreSQL binary as ``postgres`` when we are root."""
    if os.geteuid() != 0:
        return {}
    return {"user": "postgres", "group": "postgres", "extra_groups": []}


@dataclass
class PostgresCluster:
    port: int
    directory: Path
    process: subprocess.Popen[bytes]
    args: list[str] = field(default_factory=list)

    def restart(self, down_seconds: float) -> None:
        """Shut down ("fast": clients disconnected), stay down ``down_seconds``, start on the same data."""
        self.shut_down()
        time.sleep(down_seconds)
        self.start_again()

    def shut_down(self) -> None:
        """A "fast" shutdown (clients disconnected), the data kept for :meth:`start_again`."""
        self.process.send_signal(signal.SIGINT)
        self.process.wait(timeout=20)

    def start_again(self) -> None:
        """From the thread that started the cluster: the server dies with the thread that spawned it."""
        self.process = _spawn_postgres(self.args, self.directory)
        _wait_until_accepting(self)

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def connect(self) -> psycopg.Connection:
        """A connection to the maintenance database, in autocommit (CREATE/DROP DATABASE need it)."""
        return psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="postgres",
                               autocommit=True)

    def execute(self, sql: str) -> None:
        with self.connect() as conn:
            conn.execute(sql)

    def create_database(self, name: str, template: str | None = None) -> str:
        clause = f' TEMPLATE "{template}"' if template else ""
        self.execute(f'CREATE DATABASE "{name}"{clause}')
        return self.url(name)

    def drop_database(self, name: str) -> None:
        self.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def stop(self) -> None:
        self.process.send_signal(signal.SIGINT)  # "fast" shutdown: disconnects clients
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)


# Durability is irrelevant for a throw-away cluster; these make DDL and CREATE DATABASE fast.
_FAST_SETTINGS = ("fsync=off", "synchronous_commit=off", "full_page_writes=off",
                  "max_connections=200", "shared_buffers=64MB")


def start_postgres() -> PostgresCluster:
    directory = _make_directory("oss-pg-")
    if os.geteuid() == 0:
        owner = pwd.getpwnam("postgres")
        os.chown(directory, owner.pw_uid, owner.pw_gid)
    data_dir = directory / "data"
    initdb = [str(PG_BIN / "initdb"), "-D", str(data_dir), "-U", "postgres", "--auth=trust",
              "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions"]
    done = subprocess.run(initdb, capture_output=True, text=True, **_owner_options())
    if done.returncode != 0:
        raise RuntimeError(f"initdb failed ({done.returncode}): {done.stderr or done.stdout}")
    port = free_port()
    settings = ["listen_addresses=127.0.0.1", f"unix_socket_directories={directory}", *_FAST_SETTINGS]
    args = [str(PG_BIN / "postgres"), "-D", str(data_dir), "-p", str(port),
            *(arg for setting in settings for arg in ("-c", setting))]
    cluster = PostgresCluster(port=port, directory=directory, process=_spawn_postgres(args, directory), args=args)
    _wait_until_accepting(cluster)
    return cluster


def _spawn_postgres(args: list[str], directory: Path) -> subprocess.Popen[bytes]:
    with open(directory / "postgres.log", "ab") as log:
        # SIGQUIT (immediate shutdown) if we die: nothing to keep.
        return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                preexec_fn=_dying_with_parent(signal.SIGQUIT), **_owner_options())


def _wait_until_accepting(cluster: PostgresCluster) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if cluster.process.poll() is not None:
            log = (cluster.directory / "postgres.log").read_text(errors="replace")
            raise RuntimeError(f"postgres exited with {cluster.process.returncode}: {log}")
        try:
            cluster.connect().close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
