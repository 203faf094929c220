"""The stall watch: requests in the engine and no sign of life from its core for ``seconds`` is a hung
engine, said once. No output for this process's requests is no such sign on its own: they may all wait in a
core shared with other worker front ends that generates theirs; the watch then asks the core (a probe)."""

from __future__ import annotations

import asyncio

from oss_responses.engine.stall import StallWatch


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class _Engine:
    """The engine's side of the watch: its requests, and its core, which answers a probe or hangs."""

    def __init__(self) -> None:
        self.running = 0  # requests in it now
        self.hung = False  # its core answers no call (stopped, or stuck inside a step)
        self.probes = 0  # calls asked of its core

    async def probe(self) -> None:
        self.probes += 1
        if self.hung:
            await asyncio.Event().wait()


def _watch(seconds: float = 10.0) -> tuple[StallWatch, _Clock, list[str], _Engine]:
    clock, stalls, engine = _Clock(), list[str](), _Engine()
    return StallWatch(seconds, stalls.append, lambda: engine.running, engine.probe, clock), clock, stalls, engine


async def _checked_every_second(watch: StallWatch, clock: _Clock, seconds: int, outputs_per_check: int = 0) -> None:
    for _ in range(seconds):
        clock.now += 1
        watch.outputs += outputs_per_check
        watch.check()
        for _ in range(3):  # a probe asked runs, and an answer arrives, before the next check
            await asyncio.sleep(0)


def test_check_says_engine_hung_when_running_requests_get_no_output_for_its_seconds() -> None:
    watch, clock, stalls, engine = _watch()
    engine.running, engine.hung = 3, True
    asyncio.run(_checked_every_second(watch, clock, 12))
    assert len(stalls) == 1 and "no output for 10s with 3 requests running" in stalls[0]


def test_check_leaves_engine_whose_outputs_go_on() -> None:
    watch, clock, stalls, engine = _watch()
    engine.running, engine.hung = 3, True
    asyncio.run(_checked_every_second(watch, clock, 60, outputs_per_check=1))
    assert stalls == [] and engine.probes == 0


def test_check_leaves_engine_whose_core_answers_while_its_requests_wait() -> None:
    # Several front ends over one core: this one's requests wait in its queue while it generates the others'.
    watch, clock, stalls, engine = _watch()
    engine.running = 3
    asyncio.run(_checked_every_second(watch, clock, 600))
    assert stalls == [] and not watch.stalled
    assert 0 < engine.probes <= 300  # one call at most every other check


def test_check_says_engine_hung_when_its_answering_core_stops_answering() -> None:
    watch, clock, stalls, engine = _watch()
    engine.running = 2

    async def answering_then_hung() -> None:
        await _checked_every_second(watch, clock, 60)
        engine.hung = True
        await _checked_every_second(watch, clock, 8)
        assert stalls == []
        await _checked_every_second(watch, clock, 6)

    asyncio.run(answering_then_hung())
    assert len(stalls) == 1 and "answered no call" in stalls[0]


def test_check_asks_a_hung_core_once() -> None:
    watch, clock, stalls, engine = _watch()
    engine.running, engine.hung = 1, True
    asyncio.run(_checked_every_second(watch, clock, 9))
    assert engine.probes == 1 and stalls == []


def test_check_takes_a_failing_probe_for_no_answer() -> None:
    watch, clock, stalls, engine = _watch()
    engine.running = 1

    async def dead() -> None:
        raise RuntimeError("engine core dead")

    watch = StallWatch(10.0, stalls.append, lambda: engine.running, dead, clock)
    asyncio.run(_checked_every_second(watch, clock, 12))
    assert len(stalls) == 1


def test_check_leaves_idle_engine() -> None:
    watch, clock, stalls, engine = _watch()
    engine.hung = True
    asyncio.run(_checked_every_second(watch, clock, 60))
    assert stalls == [] and engine.probes == 0


def test_check_counts_stall_from_last_output_not_from_first_request() -> None:
    watch, clock, stalls, engine = _watch()
    engine.running, engine.hung = 1, True

    async def outputs_then_none() -> None:
        await _checked_every_second(watch, clock, 30, outputs_per_check=1)
        await _checked_every_second(watch, clock, 9)
        assert stalls == []
        await _checked_every_second(watch, clock, 2)

    asyncio.run(outputs_then_none())
    assert len(stalls) == 1


def test_check_says_engine_hung_once() -> None:
    watch, clock, stalls, engine = _watch()
    engine.running, engine.hung = 1, True
    asyncio.run(_checked_every_second(watch, clock, 100))
    assert len(stalls) == 1 and watch.stalled


def test_run_leaves_no_probe_waiting_on_a_hung_core() -> None:
    engine = _Engine()
    engine.running, engine.hung = 1, True

    async def watched_until_stalled() -> int:
        watch = StallWatch(0.2, lambda reason: None, lambda: engine.running, engine.probe)
        await asyncio.wait_for(watch.run(), 5)
        return len(asyncio.all_tasks()) - 1  # tasks beside this one

    assert asyncio.run(watched_until_stalled()) == 0 and engine.probes == 1
