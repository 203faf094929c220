"""The openai types' validators, built while a process starts rather than by its first response.

openai's models defer building their pydantic validators to their first use. In a fresh process
the first response built ~35 of them in 58 ms, on the worker's engine loop (every running stream
waited) and again in the API. Measured on fresh API and worker processes (SQLite, scripted engine,
one request after another): the first request's ``response.created`` came after ~80 ms and its first
delta after ~150 ms, the next requests' after ~25 and ~32 ms. With the validators built at start-up
(every model of the response types: ~480 in 60-150 ms, before the worker reports itself ready) the first
request's came after ~58 and ~68 ms. In the API this runs before ``heap.tune_garbage_collection``,
which then freezes the validators with the rest of the start-up heap; in a worker before its engine
starts.
"""

from __future__ import annotations

import logging
import sys
import time

from pydantic import BaseModel

log = logging.getLogger(__name__)

PACKAGES = ("openai.types.responses", "openai.types.shared")  # what requests, events and items are made of


def protocol_models() -> list[type[BaseModel]]:
    """Every pydantic model defined in the loaded modules of ``PACKAGES``."""
    import openai.types.responses  # noqa: F401  (loads the package and the modules it re-exports)

    modules = [module for name, module in list(sys.modules.items()) if name.startswith(PACKAGES)]
    return [
        value for module in modules for value in vars(module).values()
        if isinstance(value, type) and issubclass(value, BaseModel) and value.__module__ == module.__name__
    ]


def build_protocol_schemas(process: str) -> int:
    """Build the validators not built yet; how many were built."""
    started = time.perf_counter()
    pending = [model for model in protocol_models() if not model.__pydantic_complete__]
    for model in pending:
        model.model_rebuild()
    log.info("%s: %d openai type validators built (%.0f ms)", process, len(pending),
             (time.perf_counter() - started) * 1000)
    return len(pending)
