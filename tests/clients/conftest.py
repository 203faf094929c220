"""Real clients (Codex CLI, the Agents SDKs, the Vercel AI SDK, LangChain, Pydantic AI, LiteLLM, Microsoft
Agent Framework) against the service: one stack per test module (``support.client_stack.running_service``);
the clients themselves are in the tests."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from openai import AsyncOpenAI
from support.client_stack import Service, running_service
from support.environ import environment_restored
from support.sdk import async_sdk_client

# LiteLLM downloads its table of model prices when imported (three tries, seconds apart, offline);
# its packaged copy serves the same.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


@pytest.fixture(scope="module", autouse=True)
def environment_kept() -> Iterator[None]:
    """What a client library sets in this process's environment (LiteLLM's ``TIKTOKEN_CACHE_DIR``) goes
    with its module: the service processes later modules start inherit this environment."""
    with environment_restored():
        yield


@pytest.fixture(scope="module")
def service(redis_url: str, sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with running_service(redis_url, sqlite_template, tmp_path_factory.mktemp("clients")) as running:
        yield running


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def async_client(service: Service) -> AsyncIterator[AsyncOpenAI]:
    """The openai SDK on the module's service: what a client framework is given, or reads back what one sent."""
    client = async_sdk_client(service.base_url, "unused", max_retries=0, timeout=30)
    yield client
    await client.close()
