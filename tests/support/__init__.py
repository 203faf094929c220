"""Helpers shared by the test suite (and the bench scripts): real servers and service processes started
in temporary directories, requests accepted as the API does, and the checks streams get.

Importable as ``support`` because pytest's ``pythonpath`` setting (pyproject.toml) puts ``tests/`` on
``sys.path``; the Makefile's ``bench`` and ``soak`` targets do the same with ``PYTHONPATH``.
"""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODEL = "gpt-oss-20b"  # the model every test's settings serve
TIKTOKEN_DIR = REPO / "var" / "tiktoken"
