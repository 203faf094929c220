"""Collecting the suite stays cheap: each test process (three under ``make test``) collects every module.

It checks what the run collected: run alone, it collects only itself.
"""

from __future__ import annotations


def test_collect_suite_leaves_heavy_libraries_unimported(imported_at_collection: frozenset[str]) -> None:
    # A module-level import of one of them in a test module, or in a support module one imports, lands here.
    assert imported_at_collection == frozenset()
