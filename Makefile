# The two commands: `make run` (the whole stack locally) and `make test` (the test suite).
.PHONY: run test lint bootstrap bench soak fuzz

bootstrap:
	bash scripts/bootstrap.sh

run: bootstrap
	.venv/bin/python -m oss_responses.devstack

# The checks first: a finding fails the run before the suite starts. The suite runs in TEST_WORKERS
# processes (pytest-xdist), a test module's tests in one of them (its module fixtures are started once);
# three on two cores, since most tests wait on processes they started. The 30 slowest tests are listed at
# the end: the suite is to stay a few minutes on two cores, and CI's log shows where it does not.
TEST_WORKERS ?= 3
test: lint
	.venv/bin/python -m pytest -n $(TEST_WORKERS) --dist loadscope --durations=30

# ruff over the repository, mypy over the package (their settings: pyproject.toml)
lint: bootstrap
	.venv/bin/ruff check .
	.venv/bin/mypy oss_responses

# Bench scripts and the soak import the checkout and the test helpers (tests/support) from here.
DEV_PATH := PYTHONPATH=$(CURDIR):$(CURDIR)/tests

bench: bootstrap
	for b in bench/[!_]*.py; do $(DEV_PATH) .venv/bin/python $$b || exit 1; done

# A randomized fault soak (SIGKILL, SIGTERM, Redis restarts under running responses): tests/workers/soak.py
soak: bootstrap
	$(DEV_PATH) .venv/bin/python tests/workers/soak.py --rounds 30

# A longer fuzz run (schemathesis from /openapi.json and generated Responses bodies): tests/api/test_fuzz.py
fuzz: bootstrap
	FUZZ_EXAMPLES=300 .venv/bin/python -m pytest tests/api/test_fuzz.py --timeout=3600 -s -q
