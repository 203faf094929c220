"""Settings from the environment: a value that cannot be used stops every command at once, saying which."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from oss_responses.config import InvalidSettings, get_settings

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


@pytest.fixture(autouse=True)
def fresh_settings() -> Iterator[None]:
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


@pytest.mark.parametrize(("variable", "value", "says"), [
    ("LEASE_SECONDS", "-5", "OSS_RESPONSES_LEASE_SECONDS: Input should be greater than 0"),
    ("API_PORT", "70000", "OSS_RESPONSES_API_PORT: Input should be less than or equal to 65535"),
    ("WORKER_CONCURRENCY", "0", "OSS_RESPONSES_WORKER_CONCURRENCY: Input should be greater than or equal to 1"),
    ("DEFAULT_MAX_OUTPUT_TOKENS", "-5", "OSS_RESPONSES_DEFAULT_MAX_OUTPUT_TOKENS: Input should be greater than"),
    ("MODELS", "gpt-oss-20b", "OSS_RESPONSES_MODELS: not JSON"),
    ("LOG_LEVEL", "VERBOSE", "OSS_RESPONSES_LOG_LEVEL: Value error, unknown log level 'VERBOSE'"),
    ("ENGINE", "foo", "OSS_RESPONSES_ENGINE: Input should be 'scripted' or 'vllm'"),
    ("BUILTIN_TOOL_LABELS", '{"code_interpreter": "bogus"}', "OSS_RESPONSES_BUILTIN_TOOL_LABELS.code_interpreter"),
    ("WEBHOOK_ENDPOINTS", '[{"url": "https://h/x", "secret": "not-a-whsec!"}]',
     "OSS_RESPONSES_WEBHOOK_ENDPOINTS[0].secret: Value error, a Standard Webhooks secret"),
    ("WEBHOOK_ENDPOINTS", f'[{{"url": "ftp://h/x", "secret": "{SECRET}"}}]', "OSS_RESPONSES_WEBHOOK_ENDPOINTS[0].url"),
    # Secrets the signer takes but the openai SDK cannot verify with (the webhooks probe), and a short one.
    ("WEBHOOK_ENDPOINTS", f'[{{"url": "https://h/x", "secret": "{SECRET.removeprefix("whsec_")}"}}]',
     "OSS_RESPONSES_WEBHOOK_ENDPOINTS[0].secret: Value error, a Standard Webhooks secret"),
    ("WEBHOOK_ENDPOINTS", '[{"url": "https://h/x", "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSwAA"}]',
     "OSS_RESPONSES_WEBHOOK_ENDPOINTS[0].secret: Value error, a Standard Webhooks secret"),
    ("WEBHOOK_ENDPOINTS", '[{"url": "https://h/x", "secret": "whsec_AA=="}]',
     "OSS_RESPONSES_WEBHOOK_ENDPOINTS[0].secret: Value error, a Standard Webhooks secret"),
    # The configuration probe: each ended in a traceback of the command that first used it.
    ("DATABASE_URL", "nonsense", "OSS_RESPONSES_DATABASE_URL: Value error, not a database URL"),
    ("DATABASE_URL", "foo://bar", "OSS_RESPONSES_DATABASE_URL: Value error, unsupported database 'foo'"),
    ("REDIS_URL", "nonsense", "OSS_RESPONSES_REDIS_URL: Value error, not a Redis URL"),
    ("BROKER_URL", "http://h:6379/0", "OSS_RESPONSES_BROKER_URL: Value error, not a Redis URL"),
    # The deploy review: a Redis URL of the right scheme that Redis's clients cannot read passed, and the API
    # and worker each ended in tracebacks (the API's start, the worker's broker; the worker exited 0).
    ("REDIS_URL", "redis://127.0.0.1:6379/abc", "OSS_RESPONSES_REDIS_URL: Value error, not a Redis URL: its database"),
    ("BROKER_URL", "redis://h:6379/0?socket_timeout=soon", "OSS_RESPONSES_BROKER_URL: Value error, not a Redis URL: "),
    ("MODELS", "[]", "OSS_RESPONSES_MODELS: List should have at least 1 item"),
    ("SCRIPTED_CONTEXT_TOKENS", "-10", "OSS_RESPONSES_SCRIPTED_CONTEXT_TOKENS: Input should be greater than or equal"),
    ("MAX_OUTPUT_TOKENS_CEILINGS", '{"gpt-oss-20b": -5}', "OSS_RESPONSES_MAX_OUTPUT_TOKENS_CEILINGS.gpt-oss-20b"),
    ("QUEUE_PREFIX", "", "OSS_RESPONSES_QUEUE_PREFIX: String should have at least 1 character"),
    ("KNOWLEDGE_CUTOFF", "yesterday", "OSS_RESPONSES_KNOWLEDGE_CUTOFF: String should match pattern"),
    ("WEBHOOK_QUEUE", "responses.gpt-oss-20b", "OSS_RESPONSES_WEBHOOK_QUEUE: Value error, 'responses.gpt-oss-20b' is"),
    ("DATABASE_URL", "postgresql+psycopg://app:p@ss:w/rd@db:5432/oss",
     "OSS_RESPONSES_DATABASE_URL: Value error, not a database URL: percent-encode special characters"),
    # The rest of a password after an unescaped '@' became the host, shown by doctor, migrate and keys.
    ("DATABASE_URL", "postgresql+psycopg://app:p@ss@db:5432/oss",
     "OSS_RESPONSES_DATABASE_URL: Value error, not a database URL: percent-encode special characters"),
    # A port that is not a number: redis-py's ValueError was a traceback of the API and the worker.
    ("REDIS_URL", "redis://:p/ss@redis:6379/0", "OSS_RESPONSES_REDIS_URL: Value error, not a Redis URL: its port"),
    ("BROKER_URL", "redis://127.0.0.1:notaport/0", "OSS_RESPONSES_BROKER_URL: Value error, not a Redis URL: its port"),
])
def test_get_settings_with_unusable_value_stops_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, says: str
) -> None:
    monkeypatch.setenv(f"OSS_RESPONSES_{variable}", value)
    with pytest.raises(InvalidSettings) as stopped:
        get_settings()
    assert str(stopped.value.code).startswith("oss-responses: invalid settings\n  " + says)


def test_get_settings_lists_every_unusable_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OSS_RESPONSES_LEASE_SECONDS", "0")
    monkeypatch.setenv("OSS_RESPONSES_MAX_TOOLS", "0")
    with pytest.raises(InvalidSettings) as stopped:
        get_settings()
    assert str(stopped.value.code).count("\n  OSS_RESPONSES_") == 2


def test_get_settings_takes_log_level_in_any_case_and_a_signing_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OSS_RESPONSES_LOG_LEVEL", "debug")
    monkeypatch.setenv("OSS_RESPONSES_WEBHOOK_ENDPOINTS", f'[{{"url": "https://h/x", "secret": "{SECRET}"}}]')
    settings = get_settings()
    assert settings.log_level == "DEBUG" and settings.webhook_endpoints[0].url == "https://h/x"


@pytest.mark.parametrize("module", ["oss_responses.api", "oss_responses.workers"])
def test_command_with_unusable_setting_exits_with_one_line_not_a_traceback(module: str) -> None:
    env = {**os.environ, "OSS_RESPONSES_LEASE_SECONDS": "-5"}
    done = subprocess.run([sys.executable, "-m", module], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "oss-responses: invalid settings\n  OSS_RESPONSES_LEASE_SECONDS: Input should be greater than 0"
    )
