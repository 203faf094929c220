"""The stall watch: requests in the engine and no output for ``seconds`` is a hung engine, said once."""

from __future__ import annotations

from oss_responses.engine.stall import StallWatch


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class _Engine:
    running = 0  # requests in it now


def _watch(seconds: float = 10.0) -> tuple[StallWatch, _Clock, list[str], _Engine]:
    clock, stalls, engine = _Clock(), list[str](), _Engine()
    return StallWatch(seconds, stalls.append, lambda: engine.running, clock), clock, stalls, engine


def _checked_every_second(watch: StallWatch, clock: _Clock, seconds: int, outputs_per_check: int = 0) -> None:
    for _ in range(seconds):
        clock.now += 1
        watch.outputs += outputs_per_check
        watch.check()


def test_check_says_engine_hung_when_running_requests_get_no_output_for_its_seconds() -> None:
    watch, clock, stalls, engine = _watch()
    engine.running = 3
    _checked_every_second(watch, clock, 12)
    assert len(stalls) == 1 and "no output for 10s with 3 requests running" in stalls[0]


def test_check_leaves_engine_whose_outputs_go_on() -> None:
    watch, clock, stalls, engine = _watch()
    engine.running = 3
    _checked_every_second(watch, clock, 60, outputs_per_check=1)
    assert stalls == []


def test_check_leaves_idle_engine() -> None:
    watch, clock, stalls, _ = _watch()
    _checked_every_second(watch, clock, 60)
    assert stalls == []


def test_check_counts_stall_from_last_output_not_from_first_request() -> None:
    watch, clock, stalls, engine = _watch()
    engine.running = 1
    _checked_every_second(watch, clock, 30, outputs_per_check=1)
    _checked_every_second(watch, clock, 9)
    assert stalls == []
    _checked_every_second(watch, clock, 2)
    assert len(stalls) == 1


def test_check_says_engine_hung_once() -> None:
    watch, clock, stalls, engine = _watch()
    engine.running = 1
    _checked_every_second(watch, clock, 100)
    assert len(stalls) == 1 and watch.stalled
