"""Codex CLI (``codex exec``, the pinned @openai/codex) against the service with the scripted engine.

Codex sends what OpenAI's own backend gets: ``store: false`` with the whole conversation replayed each
turn, ``include: ["reasoning.encrypted_content"]``, a ``namespace`` tool, a ``web_search`` tool and
``client_metadata``. The scripted engine answers by quoting the last user message, or, for
``call functions.NAME {json}``, makes that call and then quotes the tool's result.

Every test runs twice: over HTTP (SSE), and over the Responses WebSocket (``supports_websockets``),
where Codex warms the conversation up (``generate: false``) and continues it by
``previous_response_id`` with only the new items. Codex falls back to HTTP when the socket fails, so
the WebSocket runs also check that it did not.
"""

from __future__ import annotations

import json
import struct
import subprocess
import zlib
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest
from support.client_stack import Service, running_service
from support.codex_cli import WEBSOCKET_FAILURES, codex_exec, missing_codex, write_codex_home
from support.node import require_client
from support.servers import start_redis


@pytest.fixture(scope="module", autouse=True)
def codex_installed() -> None:
    require_client("Codex CLI", missing_codex())


def _explain(done: subprocess.CompletedProcess[str], service: Service) -> str:
    return f"codex exited {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr[-3000:]}\n" \
           f"{service.log_tail(1500)}"


@pytest.fixture(params=["http", "websocket"])
def home(request: pytest.FixtureRequest, service: Service, tmp_path: Path) -> Path:
    return write_codex_home(tmp_path / "codex-home", service.base_url, websockets=request.param == "websocket")


def _succeeded(done: subprocess.CompletedProcess[str], service: Service) -> None:
    assert done.returncode == 0, _explain(done, service)
    assert not any(failure in done.stderr for failure in WEBSOCKET_FAILURES), _explain(done, service)


def test_codex_exec_prints_answer_to_plain_prompt(service: Service, home: Path, tmp_path: Path) -> None:
    done = codex_exec(home, tmp_path, "Name three colours of the rainbow")
    _succeeded(done, service)
    assert 'You said: "Name three colours of the rainbow".' in done.stdout, _explain(done, service)


def test_codex_exec_runs_called_command_and_answers_with_output(service: Service, home: Path, tmp_path: Path) -> None:
    call = json.dumps({"cmd": "echo hello-from-$((6 * 7))"})
    done = codex_exec(home, tmp_path, f"call functions.exec_command {call}")
    _succeeded(done, service)
    # Only the shell computes 42: the answer can quote it only if Codex ran the command and sent
    # its output back in the next request.
    assert "The tool functions.exec_command returned:" in done.stdout, _explain(done, service)
    assert "hello-from-42" in done.stdout, _explain(done, service)


def test_codex_exec_resume_replays_earlier_turn(service: Service, home: Path, tmp_path: Path) -> None:
    first = codex_exec(home, tmp_path, "Remember the word marmalade")
    _succeeded(first, service)
    # store=false: the service knows nothing of the first turn unless Codex replays it
    # (its reasoning item, the assistant message) in the second request.
    second = codex_exec(home, tmp_path, "Which word was it?", resume=True)
    _succeeded(second, service)
    assert 'You said: "Which word was it?". Earlier you said:' in second.stdout, _explain(second, service)
    assert '"Remember the word marmalade"' in second.stdout, _explain(second, service)


def test_codex_exec_resume_compacts_context_near_its_window_and_goes_on(
    service: Service, home: Path, tmp_path: Path
) -> None:
    # Codex compacts when the usage the service reported passes its limit (derived from README's
    # model_context_window; here set below the ~7,700 tokens of a first turn): a summarising turn over
    # the whole conversation, then the next turn on its summary alone.
    compact_early = ["-c", "model_auto_compact_token_limit=5000"]
    first = codex_exec(home, tmp_path, "Remember the word marmalade", options=compact_early)
    _succeeded(first, service)
    second = codex_exec(home, tmp_path, "Which word was it?", resume=True, options=compact_early)
    _succeeded(second, service)
    assert "context compacted" in second.stdout + second.stderr, _explain(second, service)
    answer = second.stdout.rsplit('You said: "Which word was it?".', 1)
    assert len(answer) == 2 and "CONTEXT CHECKPOINT COMPACTION" in answer[1], _explain(second, service)


GREETING_SCHEMA = {
    "type": "object", "additionalProperties": False, "required": ["greeting", "count"],
    "properties": {"greeting": {"type": "string"}, "count": {"type": "integer"}},
}


def test_codex_exec_with_output_schema_answers_instance_of_it(service: Service, home: Path, tmp_path: Path) -> None:
    # Codex sends its instructions as a developer message of the input and the schema as text.format.
    (tmp_path / "schema.json").write_text(json.dumps(GREETING_SCHEMA))
    options = ["--output-schema", str(tmp_path / "schema.json"), "-o", str(tmp_path / "answer.json")]
    done = codex_exec(home, tmp_path, "Say hello", options=options)
    _succeeded(done, service)
    answer = json.loads((tmp_path / "answer.json").read_text())
    jsonschema.validate(answer, GREETING_SCHEMA)
    assert answer["greeting"] == "Say hello"


def test_codex_exec_answers_after_view_image_call(service: Service, home: Path, tmp_path: Path) -> None:
    # Codex offers view_image to every model and sends the image back as the function's output.
    (tmp_path / "dot.png").write_bytes(_png_1x1())
    done = codex_exec(home, tmp_path, f"call functions.view_image {json.dumps({'path': str(tmp_path / 'dot.png')})}")
    _succeeded(done, service)
    assert "The tool functions.view_image returned: [image not shown: gpt-oss reads text only]" in done.stdout, \
        _explain(done, service)


SMALL_CONTEXT = 9000  # tokens; Codex's first request alone is ~7,700


@pytest.fixture(scope="module")
def small_context_service(sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    # A Redis of its own: on the module's, the other service's worker would take this one's tasks from the
    # shared model queue, and find no such response in its own database.
    redis = start_redis()
    try:
        with running_service(redis.url, sqlite_template, tmp_path_factory.mktemp("small-context"),
                             scripted_context_tokens=SMALL_CONTEXT) as running:
            yield running
    finally:
        redis.stop()


@pytest.mark.parametrize("transport", ["http", "websocket"])
def test_codex_exec_over_context_says_context_is_full_and_does_not_retry(
    small_context_service: Service, transport: str, tmp_path: Path
) -> None:
    # OpenAI's code for it (context_length_exceeded) is what Codex keys on: it marks its context full (so
    # that its next turn compacts) and does not retry. Any other code it takes for a passing stream error.
    service = small_context_service
    home = write_codex_home(tmp_path / "codex-home", service.base_url, websockets=transport == "websocket")
    failures_before = _context_failures(service)
    done = codex_exec(home, tmp_path, "lorem ipsum " * 1000)
    assert done.returncode != 0, _explain(done, service)
    assert "Codex ran out of room in the model's context window" in done.stdout + done.stderr, _explain(done, service)
    assert _context_failures(service) == failures_before + 1, _explain(done, service)


def _context_failures(service: Service) -> int:
    return (service.logs / "worker.log").read_text(errors="replace").count("exceeds the context window")


def _png_1x1() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00")) \
        + chunk(b"IEND", b"")
