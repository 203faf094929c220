"""Each garbage-collection pass of a bench's service process, as a line of ``$BENCH_GC_LOG.<pid>``: the wall
time it ended, its generation, its milliseconds and the objects it collected. ``bench/memory_growth.py``
puts this folder first on the ``PYTHONPATH`` of the API and worker it starts (Python imports
``sitecustomize`` at start-up); without ``BENCH_GC_LOG`` it does nothing."""

import os

if os.environ.get("BENCH_GC_LOG"):
    import gc
    import time

    _log = open(f"{os.environ['BENCH_GC_LOG']}.{os.getpid()}", "a", buffering=1)  # noqa: SIM115 (the process's)
    _began = [0.0]

    def _timed(phase: str, info: dict) -> None:  # type: ignore[type-arg]
        if phase == "start":
            _began[0] = time.perf_counter()
            return
        milliseconds = (time.perf_counter() - _began[0]) * 1000
        _log.write(f"{time.time():.3f} {info['generation']} {milliseconds:.2f} {info['collected']}\n")

    gc.callbacks.append(_timed)
