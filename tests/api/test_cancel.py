"""A cancel (``POST .../cancel``, or the DELETE of a response not yet ended) while the open streams' key holds
something other than a set (by hand, another application, a bug): the cancel's listing of its stream (the
reaper's safety net, should the end marker be lost) is refused, and the cancel stands."""

from __future__ import annotations

import pytest
import redis as redis_lib
from openai import OpenAI
from support import MODEL
from support.api_server import ApiServer
from support.sdk import end_queued

from oss_responses import redis_keys


@pytest.mark.parametrize("verb", ["cancel", "delete"])
def test_cancel_queued_response_while_open_streams_key_is_overwritten_cancels_it(
    client: OpenAI, api: ApiServer, redis: redis_lib.Redis, caplog: pytest.LogCaptureFixture, verb: str
) -> None:
    """Every cancel answered 500 with a traceback (WRONGTYPE from the SADD) until a reaper's pass replaced the key,
    nothing cancelled, and a running response's worker was never told (the PUBLISH comes after)."""
    created = client.responses.create(model=MODEL, input="cancel me", background=True)
    redis.set(redis_keys.OPEN_STREAMS, "not a set")
    end_queued(client, api.db, created.id, verb)
    assert redis.get(redis_keys.cancel(created.id)) == b"1"  # flagged for any worker that takes its task
    assert redis.get(redis_keys.OPEN_STREAMS) == b"not a set"  # the reaper's to replace, not the API's
    assert any(redis_keys.OPEN_STREAMS in record.getMessage() and record.levelname == "WARNING"
               for record in caplog.records)
    assert not [record for record in caplog.records if record.exc_info]
