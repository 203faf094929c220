"""``POST /v1/responses/input_tokens`` with ``truncation: "auto"``: the prompt counted as the model's
workers would cut it, by the context they announce in Redis (a worker in-process, its engine's context
800 tokens; the answer's room the default output budget, at most half of it)."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest
import redis as redis_lib
from openai import OpenAI
from support import MODEL
from support.api_server import serve_in_thread
from support.stalls import waits_meanwhile

from oss_responses import redis_keys
from oss_responses.config import Settings
from oss_responses.vocab import load_encoding
from oss_responses.workers.context import WorkerContext
from oss_responses.workers.testing import local_worker, run_response_now

CONTEXT = 800
WORDS = 100


@pytest.fixture
def small_context_worker(settings: Settings) -> Iterator[WorkerContext]:
    with local_worker(settings.model_copy(update={"scripted_context_tokens": CONTEXT})) as ctx:
        yield ctx


def _chain(client: OpenAI, worker: WorkerContext) -> str:
    """Two turns of ``WORDS`` words each, run by ``worker``; the last one's id."""
    previous = None
    for word in ("alpha", "beta"):
        response = client.responses.create(model=MODEL, input=f"{word} " * WORDS, previous_response_id=previous,
                                           truncation="auto", background=True)
        assert run_response_now(response.id, worker=worker) == "completed"
        previous = response.id
    assert previous is not None
    return previous


def test_count_input_tokens_with_truncation_auto_counts_prompt_worker_cut(
    client: OpenAI, small_context_worker: WorkerContext
) -> None:
    previous = _chain(client, small_context_worker)
    turn = {"model": MODEL, "input": "gamma " * WORDS, "previous_response_id": previous, "truncation": "auto"}

    counted = client.responses.input_tokens.count(**turn)  # type: ignore[arg-type]
    created = client.responses.create(**turn, background=True)  # type: ignore[call-overload]
    assert run_response_now(created.id, worker=small_context_worker) == "completed"

    usage = client.responses.retrieve(created.id).usage
    assert usage is not None and counted.input_tokens == usage.input_tokens <= CONTEXT // 2


def test_count_input_tokens_with_truncation_disabled_counts_whole_conversation(
    client: OpenAI, small_context_worker: WorkerContext
) -> None:
    previous = _chain(client, small_context_worker)
    turn = {"model": MODEL, "input": "gamma " * WORDS, "previous_response_id": previous}

    whole = client.responses.input_tokens.count(**turn).input_tokens  # type: ignore[arg-type]
    cut = client.responses.input_tokens.count(**turn, truncation="auto").input_tokens  # type: ignore[arg-type]

    assert cut <= CONTEXT // 2 < whole


def test_count_input_tokens_with_truncation_auto_counts_whole_when_no_worker_announced_context(
    client: OpenAI, small_context_worker: WorkerContext, redis: redis_lib.Redis
) -> None:
    previous = _chain(client, small_context_worker)
    turn = {"model": MODEL, "input": "gamma " * WORDS, "previous_response_id": previous}
    redis.delete(redis_keys.model_context(MODEL))  # as once the model's workers have been down a while

    whole = client.responses.input_tokens.count(**turn).input_tokens  # type: ignore[arg-type]
    assert client.responses.input_tokens.count(**turn, truncation="auto").input_tokens == whole  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["list", "not a number"])
def test_count_input_tokens_with_truncation_auto_counts_whole_when_announced_context_is_overwritten(
    client: OpenAI, small_context_worker: WorkerContext, redis: redis_lib.Redis, value: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The context's key holding a list or a string that is no count (by hand, another application, a bug) was a
    500 with a traceback (WRONGTYPE, or int() of it), until a worker of the model announced its context again:
    without a worker up, for good. It is read as no announcement, with a WARNING."""
    previous = _chain(client, small_context_worker)
    turn = {"model": MODEL, "input": "gamma " * WORDS, "previous_response_id": previous}
    key = redis_keys.model_context(MODEL)
    redis.delete(key)
    if value == "list":
        redis.rpush(key, "800")
    else:
        redis.set(key, value)

    whole = client.responses.input_tokens.count(**turn).input_tokens  # type: ignore[arg-type]
    assert client.responses.input_tokens.count(**turn, truncation="auto").input_tokens == whole  # type: ignore[arg-type]
    assert any(key in record.getMessage() and record.levelname == "WARNING" for record in caplog.records)


@pytest.mark.parametrize("field", ["bogus", "stream", "max_output_tokens"])
def test_count_input_tokens_with_field_it_does_not_take_is_400(client: OpenAI, field: str) -> None:
    with pytest.raises(openai.BadRequestError) as error:
        client.responses.input_tokens.count(model=MODEL, input="hi", extra_body={field: 1})
    assert (error.value.param, error.value.code) == (field, "unknown_parameter")


def test_count_input_tokens_of_costly_input_does_not_stall_api(client: OpenAI, api) -> None:  # type: ignore[no-untyped-def]
    """40,000 ``x`` tokenize in ~1 s holding the GIL: in the API's own process that stalled every request
    and stream it served; a costly prompt is tokenized in a child process."""
    counted, waits = waits_meanwhile(
        api.base_url, lambda: client.responses.input_tokens.count(model=MODEL, input="x" * 40_000).input_tokens
    )
    assert counted > 5_000  # 8 characters a token
    assert len(waits) > 10 and max(waits) < 0.5, max(waits)


def test_api_loads_harmony_encoding_before_it_serves(settings: Settings, redis: redis_lib.Redis) -> None:
    """Loading the vocabulary holds the GIL for 0.3 s (1.2 s seen on CI): loaded on an API's first count, it
    stalled every stream the process relayed meanwhile (the test above, failed so on CI)."""
    load_encoding.cache_clear()  # as in a new process
    for _base_url in serve_in_thread(settings):
        assert load_encoding.cache_info().currsize == 1
