"""A short run of the fault soak (``soak.py``; ``make soak`` runs a long randomized one): one round of
each fault, with responses of every kind running under it, each ending intact."""

from __future__ import annotations

from pathlib import Path

from support.soak import FAULTS, run_soak


def test_responses_survive_each_fault_intact(tmp_path: Path) -> None:
    counts = run_soak(len(FAULTS), seed=7, logs=tmp_path, schedule=list(FAULTS), report=lambda line: None)
    assert counts == dict.fromkeys(FAULTS, 1)
