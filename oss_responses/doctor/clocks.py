"""Whether the hosts' clocks agree: this host's and every ready worker's against Redis's (``clocks.py``).
A host seconds off stamps times the others disagree with (a response completed before it was created,
until the worker clamps it), and signs webhooks that receivers refuse once it is 5 minutes off."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import redis as redis_lib

from oss_responses.announcements import announcements
from oss_responses.clocks import SKEW_WARN_SECONDS, redis_skew_sync, skewed
from oss_responses.config import Settings
from oss_responses.doctor.report import CheckResult
from oss_responses.doctor.stores import TIMEOUT_SECONDS


def check_clocks(settings: Settings) -> Iterator[CheckResult]:
    client = redis_lib.Redis.from_url(settings.redis_url, socket_timeout=TIMEOUT_SECONDS,
                                      socket_connect_timeout=TIMEOUT_SECONDS)
    try:
        own = redis_skew_sync(client)
        announced = announcements(client)
    except redis_lib.RedisError:  # the redis check FAILs for it
        yield CheckResult("clocks", "warn", "not checked: the clocks are compared with Redis's, which does not answer")
        return
    finally:
        client.close()
    skews = [(worker.get("pid"), _skew_of(worker)) for worker in announced]
    off = [(pid, skew) for pid, skew in skews if skew is not None and skewed(skew)]
    if skewed(own):
        yield CheckResult("clocks", "warn", f"this host's clock is {own:+.1f} s from Redis's: run NTP here")
    if off:
        worst = max((skew for _, skew in off), key=abs)
        yield CheckResult("clocks", "warn", f"{len(off)} ready worker(s) have a clock over {SKEW_WARN_SECONDS:.0f} s "
                                            f"from Redis's (up to {worst:+.1f} s; pids "
                                            f"{', '.join(str(pid) for pid, _ in off)}): run NTP on their hosts "
                                            "(receivers refuse the webhooks they sign 5 minutes off)")
    if not off and not skewed(own):
        yield CheckResult("clocks", "ok", f"this host and {len(announced)} ready worker(s) within "
                                          f"{SKEW_WARN_SECONDS:.0f} s of Redis's clock")


def _skew_of(announced: dict[str, Any]) -> float | None:
    """A worker's announced skew; None from a release before workers announced it."""
    value = announced.get("clock_skew")
    return float(value) if isinstance(value, int | float) else None
