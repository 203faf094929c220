"""Taking a response: the lease, the handoff mark, the cancel flag and the stream's tail in one round trip."""

from __future__ import annotations

import pytest
import redis as redis_lib
import redis.asyncio as redis_asyncio

from oss_responses import redis_keys
from oss_responses.workers.claim import Claim, claim
from oss_responses.workers.lease import Lease


def claim_as(redis_url: str, worker: str) -> Claim | None:
    # The lease's own (async) client only renews and releases it, on the loop: unused here.
    lease = Lease(redis_asyncio.Redis.from_url(redis_url), "r1", worker, 5)
    with redis_lib.Redis.from_url(redis_url) as client:
        return claim(client, lease, "r1")


def test_claim_response_reads_its_flags_and_the_next_sequence_number(redis_url: str, redis: redis_lib.Redis) -> None:
    redis.set(redis_keys.resume("r1"), "handoff")
    redis.set(redis_keys.cancel("r1"), "1")
    redis.xadd(redis_keys.events("r1"), {"f": b"created"}, id="0-1")
    redis.xadd(redis_keys.events("r1"), {"f": b"queued"}, id="0-2")

    assert claim_as(redis_url, "w1") == Claim(resume_mark=b"handoff", cancel_requested=True, next_sequence_number=2)
    assert redis.get(redis_keys.lease("r1")) == b"w1"
    assert redis.pttl(redis_keys.lease("r1")) > 4_000
    assert redis.exists(redis_keys.resume("r1")) == 0  # a handoff is counted once


def test_claim_response_lists_its_stream_as_open(redis_url: str, redis: redis_lib.Redis) -> None:
    claim_as(redis_url, "w1")

    assert redis.smembers(redis_keys.OPEN_STREAMS) == {b"r1"}


def test_claim_response_without_stream_or_flags_starts_at_zero(redis_url: str, redis: redis_lib.Redis) -> None:
    assert claim_as(redis_url, "w1") == Claim(resume_mark=b"", cancel_requested=False, next_sequence_number=0)


def test_claim_response_of_ended_stream_has_no_next_sequence_number(redis_url: str, redis: redis_lib.Redis) -> None:
    redis.xadd(redis_keys.events("r1"), {"f": b"created"}, id="0-1")
    redis.xadd(redis_keys.events("r1"), {"end": "cancelled"})

    taken = claim_as(redis_url, "w1")

    assert taken is not None and taken.next_sequence_number is None


def test_claim_response_leased_elsewhere_changes_nothing(redis_url: str, redis: redis_lib.Redis) -> None:
    redis.set(redis_keys.lease("r1"), "w1")
    redis.set(redis_keys.resume("r1"), "handoff")

    assert claim_as(redis_url, "w2") is None
    assert redis.get(redis_keys.lease("r1")) == b"w1"
    assert redis.get(redis_keys.resume("r1")) == b"handoff"  # left for the worker that holds the lease
    assert not redis.exists(redis_keys.OPEN_STREAMS)


def test_claim_response_keeps_its_running_stream_until_its_end(redis_url: str, redis: redis_lib.Redis) -> None:
    """The accept's opening events expire unless claimed (an accept undone while Redis was away may have
    left them); a claimed stream runs without a TTL, as before."""
    redis.xadd(redis_keys.events("r1"), {"f": b"created"}, id="0-1")
    redis.expire(redis_keys.events("r1"), 600)

    claim_as(redis_url, "w1")

    assert redis.ttl(redis_keys.events("r1")) == -1


def test_claim_response_of_ended_stream_keeps_its_ttl(redis_url: str, redis: redis_lib.Redis) -> None:
    redis.xadd(redis_keys.events("r1"), {"f": b"created"}, id="0-1")
    redis.xadd(redis_keys.events("r1"), {"end": "cancelled"})
    redis.expire(redis_keys.events("r1"), 600)

    claim_as(redis_url, "w1")

    assert 0 < redis.ttl(redis_keys.events("r1")) <= 600


def test_claim_response_of_stream_key_holding_something_else_says_so(redis_url: str, redis: redis_lib.Redis) -> None:
    """A refused read of the stream (WRONGTYPE) was a script error raised after the lease was taken."""
    redis.set(redis_keys.cancel("r1"), "1")
    redis.set(redis_keys.events("r1"), "not a stream")

    assert claim_as(redis_url, "w1") == Claim(
        resume_mark=b"", cancel_requested=True, next_sequence_number=0, overwritten=True
    )
    assert redis.get(redis_keys.lease("r1")) == b"w1"


def test_claim_response_of_resume_mark_key_holding_something_else_reads_no_mark(
    redis_url: str, redis: redis_lib.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """Its GETDEL raised WRONGTYPE after the lease was taken: the task raised, and a queued response stayed queued
    (its lease held, so not failed as unrun) until the stale sweep, a running one was taken over again and again.
    Read as no mark, a takeover is counted: max_takeovers still bounds it."""
    redis.rpush(redis_keys.resume("r1"), "not a mark")

    with caplog.at_level("WARNING", logger="oss_responses.workers.claim"):
        assert claim_as(redis_url, "w1") == Claim(resume_mark=b"", cancel_requested=False, next_sequence_number=0)
    assert redis.get(redis_keys.lease("r1")) == b"w1"
    assert redis.exists(redis_keys.resume("r1")) == 0  # consumed, as a mark is
    assert any(redis_keys.resume("r1") in r.getMessage() for r in caplog.records)


def test_claim_response_while_open_streams_key_holds_something_else_takes_it(
    redis_url: str, redis: redis_lib.Redis
) -> None:
    """Its SADD raised WRONGTYPE after the lease was taken: every claim of every response raised, none started
    (the reaper's next pass replaces the key)."""
    redis.set(redis_keys.OPEN_STREAMS, "not a set")

    assert claim_as(redis_url, "w1") == Claim(resume_mark=b"", cancel_requested=False, next_sequence_number=0)
    assert redis.get(redis_keys.lease("r1")) == b"w1"


def test_claim_response_whose_relay_is_alive_names_no_relay(redis_url: str, redis: redis_lib.Redis) -> None:
    """The common case costs the start no round trip more: the claim itself found the API process alive."""
    redis.set(redis_keys.relay("r1"), "api-1")
    redis.set(redis_keys.api_alive("api-1"), "1")

    taken = claim_as(redis_url, "w1")

    assert taken is not None and taken.missing_relay is None


def test_claim_response_whose_relay_lost_its_liveness_names_the_relay(redis_url: str, redis: redis_lib.Redis) -> None:
    redis.set(redis_keys.relay("r1"), "api-1")

    taken = claim_as(redis_url, "w1")

    assert taken is not None and taken.missing_relay == "api-1"
