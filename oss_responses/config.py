"""Settings: one pydantic-settings class, environment prefix ``OSS_RESPONSES_``.

Nothing here is built at import time; call :func:`get_settings` (cached) or build
``Settings(...)`` explicitly in tests. Every field is listed in README.md's table.
"""

from __future__ import annotations

import base64
import logging
import re
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError

from oss_responses.harmony.builtin_tools import DEFAULT_BUILTIN_LABELS, Builtin
from oss_responses.webhooks.signing import signed_headers


def _log_level(name: str) -> str:
    level = name.upper()
    if level not in logging.getLevelNamesMapping():
        raise ValueError(f"unknown log level {name!r} (DEBUG, INFO, WARNING, ERROR or CRITICAL)")
    return level


_UNESCAPED_PASSWORD = ("not a database URL: percent-encode special characters in the user name and password "
                       "(@ as %40, : as %3A, / as %2F, # as %23)")
# The schemes of a Redis URL (redis-py's): the event log's, and the broker's (its queues are Redis lists).
REDIS_SCHEMES = ("redis", "rediss", "unix")


def valid_database_url(url: str) -> str:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
        backend = parsed.get_backend_name()
    except ArgumentError:
        raise ValueError("not a database URL (sqlite:///PATH or postgresql+psycopg://USER@HOST/DB)") from None
    except ValueError:  # the port's int(): an unescaped '@', ':' or '/' in the password moved the parts
        raise ValueError(_UNESCAPED_PASSWORD) from None
    if "@" in (parsed.host or ""):  # an unescaped '@' in the password: the rest of it taken for the host
        raise ValueError(_UNESCAPED_PASSWORD)
    if backend not in ("sqlite", "postgresql"):
        raise ValueError(f"unsupported database {backend!r}: sqlite:///PATH or postgresql+psycopg://USER@HOST/DB")
    return url


def _redis_url(url: str | None) -> str | None:
    if url is None:
        return url
    parts = urlsplit(url)
    if parts.scheme not in REDIS_SCHEMES:
        raise ValueError("not a Redis URL (redis://HOST:PORT/DB, rediss://... or unix:///PATH)")
    try:
        parts.port  # noqa: B018  # what redis-py reads at the first connection, the command's traceback then
    except ValueError:  # not a number: often an unescaped '/', '#' or '?' in the password, whose part it echoes
        raise ValueError("not a Redis URL: its port is not a number (percent-encode special characters in the "
                         "password: / as %2F, # as %23, ? as %3F, @ as %40)") from None
    from redis.connection import parse_url

    # Read as every client of it reads it: a query option redis-py cannot read, or a database that is no
    # number (which redis-py drops and kombu refuses), passed here and ended the API's start and the worker's
    # broker in tracebacks (the worker exiting 0).
    try:
        parse_url(url)  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
    except ValueError as exc:
        raise ValueError(f"not a Redis URL: {exc}") from None
    database = parts.path.strip("/") if parts.scheme != "unix" else ""
    if database and not database.isdigit():
        raise ValueError(f"not a Redis URL: its database (the path) is a number, not {database!r}: redis://HOST:PORT/0")
    return url


WEBHOOK_SECRET_PREFIX = "whsec_"
MIN_WEBHOOK_SECRET_BYTES = 24
_WEBHOOK_SECRET_FORM = (
    f"a Standard Webhooks secret: '{WEBHOOK_SECRET_PREFIX}' followed by the base64 (with its padding) of at least "
    f"{MIN_WEBHOOK_SECRET_BYTES} random bytes"
)


class WebhookEndpoint(BaseModel):
    """Where terminal background responses are announced, and the Standard Webhooks secret signing them."""

    url: str = Field(pattern=r"^https?://")
    secret: SecretStr  # "whsec_" + base64, as OpenAI's dashboard gives one

    @field_validator("secret")
    @classmethod
    def _signs(cls, secret: SecretStr) -> SecretStr:
        """A secret that cannot sign, or that the receiver's SDK cannot read (no ``whsec_``, base64 without its
        padding: the openai SDK refuses every delivery signed with it), would fail every delivery, each
        attempt only in a worker's log."""
        value = secret.get_secret_value()
        try:
            key = base64.b64decode(value.removeprefix(WEBHOOK_SECRET_PREFIX), validate=True)
            signed_headers(value, "msg_check", "{}")
        except Exception as exc:
            raise ValueError(_WEBHOOK_SECRET_FORM) from exc
        if not value.startswith(WEBHOOK_SECRET_PREFIX) or len(key) < MIN_WEBHOOK_SECRET_BYTES:
            raise ValueError(_WEBHOOK_SECRET_FORM)
        return secret


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="OSS_RESPONSES_", extra="ignore")

    # --- stores -------------------------------------------------------------
    database_url: Annotated[str, AfterValidator(valid_database_url)] = Field(
        "sqlite:///./var/oss-responses.db",
        description="SQLAlchemy URL (sync form). sqlite:///... or postgresql+psycopg://...",
    )
    database_pool_size: int = Field(
        16, ge=1,
        description="Database connections each API or worker process keeps open for reuse (up to 10 more "
        "during a burst)",
    )
    database_prepared_statements: bool = Field(
        True,
        description="PostgreSQL: let psycopg prepare a statement one connection ran 5 times; false behind a "
        "PgBouncer in transaction pooling mode (before 1.21's max_prepared_statements), where the next "
        "transaction may run on another server connection",
    )
    redis_url: Annotated[str, AfterValidator(_redis_url)] = Field(
        "redis://127.0.0.1:6379/0", description="Redis for events, leases, cancel flags"
    )
    broker_url: Annotated[str | None, AfterValidator(_redis_url)] = Field(
        None, description="Celery broker; defaults to redis_url"
    )

    # --- models and queues --------------------------------------------------
    models: list[Annotated[str, Field(min_length=1)]] = Field(
        default_factory=lambda: ["gpt-oss-20b"], min_length=1,
        description="Model names served; each has its own Celery queue (see queue_prefix)",
    )
    queue_prefix: str = Field("responses.", min_length=1, description="Celery queue of a model = prefix + model name")

    # --- event log ----------------------------------------------------------
    event_ttl_seconds: int = Field(
        86_400, ge=1,
        description="How long a response's event stream is kept after it ended",
    )
    unstored_event_ttl_seconds: int = Field(
        300, ge=1,
        description="How long the event stream of a store=false response is kept after it ended (at most "
        "event_ttl_seconds): no route reads it once its own client's stream ended, and it holds the whole output "
        "(~90 KB for 256 tokens)",
    )
    stream_ping_seconds: float = Field(
        15.0, gt=0, description="the longest a stream goes without an event: a quiet one gets a keepalive event "
        "before that (the first 3/4 to 1 interval after its last event, then one per interval)"
    )

    # --- worker -------------------------------------------------------------
    worker_model: str = Field("gpt-oss-20b", min_length=1, description="The model (and queue) this worker serves")
    worker_concurrency: int = Field(8, ge=1, description="Responses one worker runs at once (Celery threads)")
    worker_stop_seconds: float = Field(
        25.0, gt=0,
        description="A stopping worker (SIGTERM, SIGINT) that has not exited this many seconds after the signal exits "
        "at once: a Redis that stopped answering (SIGSTOP, a blackholed link) held Celery's own stop on its "
        "broker calls for over 60 s; its responses are left to their leases and its tasks to the broker. Below the "
        "orchestrator's grace period (docker-compose: 30 s). One that runs no task exits as soon as its broker is "
        "found silent",
    )
    engine: Literal["scripted", "vllm"] = Field("scripted", description="Which engine the worker runs")
    lease_seconds: float = Field(15.0, gt=0, description="TTL of a running response's lease; renewed every third of it")
    reaper_interval_seconds: float = Field(
        1.0, gt=0,
        description="How often a worker looks for responses whose lease expired (and dispatches their takeover)",
    )
    save_retry_seconds: float = Field(
        120.0, ge=0,
        description="How long a worker retries saving a finished response, or starting one, while the database or "
        "Redis is unreachable; and how long a worker starting while its Redis, or its database, does not answer (or "
        "the database is behind the release's migrations) waits for it (a line per try; a SIGTERM meanwhile stops it "
        "within 5 s) before it exits 1",
    )
    response_retention_seconds: int = Field(
        0, ge=0,
        description="A stored response is deleted (as a DELETE would, with its webhook deliveries) this long after it "
        "was created, once it has ended, and the webhook deliveries of one deleted before then this long after "
        "they were logged; 0: kept until deleted. OpenAI keeps responses 30 days: 2592000",
    )
    stale_queued_seconds: int = Field(
        600, ge=1,
        description="A response queued longer than this has its task sent again (once per such period, while a "
        "worker serves its model)",
    )
    max_takeovers: int = Field(
        3, ge=0, description="A response whose workers were lost more often than this fails instead of being taken over"
    )
    render_process_above_chars: int = Field(
        262_144, ge=0,
        description="A prompt that costs more to tokenise than this many characters of prose is tokenised in a child "
        "process (of the worker, or of the API for input_tokens): harmony holds the GIL while it tokenises (about "
        "0.2 s per MB of prose; an unbroken run of L bytes costs L²/256 characters' worth), which would stall "
        "every running response",
    )
    render_cache_bytes: int = Field(
        64 * 1024 * 1024, ge=0,
        description="Bytes of rendered prompt messages a worker (and an API process, for input_tokens) keeps, the "
        "least recently used dropped first: a continued conversation then tokenises only its new messages "
        "(bench/prompt_render.py: an agent's 160th response, 441 messages, 72k tokens, held the worker's GIL 139 ms "
        "rendered whole, 5 ms so); a kept message costs about its text's length plus 4 bytes per token; 0 keeps none",
    )
    grammar_compile_seconds: float = Field(
        10.0, gt=0,
        description="vLLM: a JSON schema (text.format, a strict function's parameters) whose grammar does not compile "
        "within this many seconds fails its response (code invalid_prompt); each new schema is first compiled in a "
        "child process of the worker, so that none costs the engine longer (a minLength of 20,000 took 5-13 s)",
    )
    engine_stall_seconds: float = Field(
        300.0, ge=0,
        description="vLLM: an engine that gives no output for this many seconds while requests run, and whose engine "
        "core answers no call meanwhile, is taken as hung (a GPU that stopped answering; vLLM waits on it forever) and "
        "stops the worker as a dead engine core does: its running responses go on with other workers; 0: never",
    )
    visibility_timeout_seconds: int = Field(
        300, ge=1,
        description="Redis broker: when an unacknowledged task is redelivered (set it alike on every worker: any "
        "worker redelivers any model's)",
    )
    stream_interval: int = Field(
        1, ge=1, le=64,
        description="Tokens per engine output of a response after its first (vLLM's stream_interval, honoured by "
        "both engines): each delta event then carries up to this many tokens, and the worker, Redis and the API do "
        "their per-event work that many times less often; 1 streams every token as it comes",
    )

    # --- scripted engine ----------------------------------------------------
    scripted_tokens_per_second: float = Field(
        0.0, ge=0, description="Per-response speed of the scripted engine; 0 = unlimited"
    )
    scripted_step_interval_seconds: float = Field(
        0.0, ge=0, description="Scripted engine step: one token for every running response per step; 0 = no stepping"
    )
    scripted_context_tokens: int | None = Field(
        None, ge=1,
        description="The scripted model's context (prompt and output), as vLLM's max_model_len; unset = no limit",
    )

    # --- vLLM engine --------------------------------------------------------
    vllm_model: str = Field("openai/gpt-oss-20b", description="Model path or hub name for vLLM")
    vllm_dtype: str = Field("auto", description="vLLM dtype")
    vllm_tensor_parallel_size: int = Field(1, ge=1, description="vLLM tensor_parallel_size")
    vllm_max_model_len: int | None = Field(None, ge=1, description="vLLM max_model_len")
    vllm_gpu_memory_utilization: float = Field(0.9, gt=0, le=1, description="vLLM gpu_memory_utilization")
    vllm_enable_prefix_caching: bool = Field(True, description="vLLM enable_prefix_caching")
    vllm_engine_args: dict[str, Any] = Field(
        default_factory=dict, description="Any other AsyncEngineArgs, as JSON (e.g. {\"enforce_eager\": true})"
    )
    vllm_frontends: int = Field(
        1, ge=1, le=64,
        description="Worker processes sharing one vLLM engine core (vLLM's --api-server-count): the worker command "
        "starts the engine core once and this many Celery workers as its clients, each with its own engine loop; "
        "raise it when one worker's loop thread, not the GPU, limits tokens/s",
    )
    vllm_force_scripted: bool = Field(
        False,
        description="Tests/demos on random-weight models only: vLLM samples the scripted engine's answer "
        "(a forcing logits processor), so its output is valid, deterministic harmony",
    )

    # --- harmony rendering --------------------------------------------------
    tiktoken_dir: Path = Field(
        Path("./var/tiktoken"), description="Where o200k_base.tiktoken is unpacked (TIKTOKEN_ENCODINGS_BASE)"
    )
    knowledge_cutoff: str = Field(
        "2024-06", pattern=r"^\d{4}-(0[1-9]|1[0-2])$", description="Knowledge cutoff in gpt-oss's system message"
    )
    default_reasoning_effort: Literal["low", "medium", "high"] = Field("medium", description="When a request sets none")
    default_max_output_tokens: int = Field(
        4096, ge=16,
        description="Output budget when a request sets none (at most the model's max_output_tokens ceiling): "
        "workers generate up to it, the API counts it out of "
        "the context for input_tokens' truncation (set it alike on both)",
    )

    # --- tools (MCP) --------------------------------------------------------
    tool_servers: dict[str, str] = Field(
        default_factory=dict,
        description='MCP servers by label, as JSON: {"code_interpreter": "http://calc:8811/mcp"}',
    )
    builtin_tool_labels: dict[str, Builtin] = Field(
        default_factory=lambda: dict[str, Builtin](DEFAULT_BUILTIN_LABELS),
        description="Labels served as gpt-oss's built-in tools: label -> python | browser",
    )
    mcp_url_allowlist: list[str] = Field(
        default_factory=list, description="URL prefixes a request's own server_url may use"
    )
    mcp_allow_private_urls: bool = Field(False, description="Allow loopback/private server_url addresses")
    mcp_call_timeout_seconds: float = Field(30.0, gt=0, description="Timeout of one MCP tool call")
    idempotent_tools: list[str] = Field(
        default_factory=list,
        description="MCP tools safe to run again after a lost worker, besides those with idempotentHint: "
        '["calc.*", "docs.search"]',
    )

    # --- sealed items (store=false clients) -----------------------------------
    encryption_keys: list[SecretStr] = Field(
        default_factory=list,
        description="Keys sealing reasoning.encrypted_content, compaction items and MCP credentials, as a JSON list: "
        "the first seals, every one opens (rotate by prepending). Each: python -c \"from oss_responses.sealing "
        "import new_key; print(new_key())\". None set: include=[\"reasoning.encrypted_content\"] and MCP "
        "authorization/headers are 400s",
    )

    # --- limits (what one request may ask for) --------------------------------
    max_body_bytes: int = Field(
        16 * 1024 * 1024, ge=1,
        description="Largest request body accepted; a larger one is a 413 before it is read whole",
    )
    allowed_origins: list[str] = Field(
        default_factory=list,
        description="Browser origins (scheme://host[:port]) whose requests are served, with CORS headers, as JSON; "
        "a request with any other Origin header (a web page's) is a 403 origin_not_allowed; [\"*\"]: any origin",
    )
    max_header_bytes: int = Field(
        64 * 1024, ge=4096,
        description="Largest request header block (request line and headers); a larger one is a 431 and the "
        "connection is closed",
    )
    request_read_seconds: float = Field(
        60.0, gt=0,
        description="A request's headers, and then its body, must each arrive within this; else a 408 and the "
        "connection is closed (a connection that sends no request is closed after it too)",
    )
    keep_alive_seconds: float = Field(
        75.0, gt=0,
        description="How long a connection may stay idle between two requests before the API closes it; keep it "
        "above the idle timeout of the proxy or load balancer in front, which reuses its connections to the API "
        "(AWS ALB and nginx's upstream keepalive_timeout: 60 s): a request it sends on one the API is closing "
        "is answered 502",
    )
    send_stall_seconds: float = Field(
        120.0, ge=0,
        description="A client that reads nothing of its answer for this long (its connection's send buffer full all "
        "along: an event stream it stopped reading) is disconnected, as if it had left; 0: never",
    )
    max_json_depth: int = Field(
        64, ge=1, description="Deepest nesting of arrays and objects a JSON body may have (400 beyond)"
    )
    max_input_items: int = Field(2048, ge=1, description="Most items one request's `input` may hold (400 beyond)")
    max_tools: int = Field(128, ge=1, description="Most entries one request's `tools` may hold (400 beyond)")
    max_conversation_bytes: int = Field(
        16 * 1024 * 1024, ge=1,
        description="Most bytes of items (their JSON) a conversation may hold for items to be added to it, by "
        "POST /v1/conversations/{id}/items or by a response created in it (400 beyond; a response's own turn is "
        "appended whole): every response in it, and every count of its tokens, reads all of them",
    )
    max_output_tokens_ceiling: int = Field(
        131_072, ge=16,
        description="Largest max_output_tokens a request may ask of a model not in max_output_tokens_ceilings",
    )
    max_output_tokens_ceilings: dict[str, Annotated[int, Field(ge=16)]] = Field(
        default_factory=dict,
        description='Per-model max_output_tokens ceilings, as JSON: {"gpt-oss-20b": 32768} '
        "(400 naming max_output_tokens beyond)",
    )
    max_queued_per_model: int = Field(
        1000, ge=0,
        description="Tasks a model's Celery queue may hold waiting; a request beyond is a 429 (0 = no limit)",
    )
    queue_full_retry_after_seconds: int = Field(
        5, ge=0,
        description="Retry-After of a 429 refused for a full model queue",
    )

    # --- operations: logs, metrics, webhooks --------------------------------------
    log_format: Literal["json", "text"] = Field(
        "json", description="Log lines as one JSON object each (production) or plain text (development; `make run`)"
    )
    log_level: Annotated[str, AfterValidator(_log_level)] = Field(
        "INFO", description="Log level (DEBUG, INFO, WARNING, ...); DEBUG also shows the HTTP clients' requests"
    )
    worker_metrics_port: int = Field(
        0, ge=0, le=65535,
        description="Port of the worker's Prometheus /metrics (0 = not served); one port per worker process",
    )
    webhook_endpoints: list[WebhookEndpoint] = Field(
        default_factory=list,
        description='Webhook endpoints, as JSON: [{"url": "https://...", "secret": "whsec_..."}]; each gets '
        "response.completed/failed/cancelled/incomplete of background responses, signed (Standard Webhooks)",
    )
    webhook_queue: str = Field(
        "webhooks", min_length=1, description="Celery queue of webhook deliveries (workers consume it)"
    )
    webhook_max_attempts: int = Field(10, ge=1, description="Attempts of one webhook delivery before it is given up")
    webhook_backoff_seconds: float = Field(
        2.0, ge=0,
        description="Delay before a delivery's second attempt; doubled at each later one (at most half of "
        "visibility_timeout_seconds, and an hour)",
    )
    webhook_timeout_seconds: float = Field(
        10.0, gt=0, description="Deadline of one webhook POST, from its connection to its answer's status"
    )
    webhook_resend_after_seconds: float = Field(
        600.0, gt=0,
        description="A delivery still pending this long (its task was lost), or retrying this long past its "
        "longest backoff, is sent again by a worker's sweeper",
    )

    # --- API keys and ownership ------------------------------------------------
    auth: Literal["open", "keys"] = Field(
        "open",
        description="open: no API keys, anyone who reaches the API sees every response (logged as a warning at start); "
        "keys: every /v1 request needs `Authorization: Bearer` with a key (python -m oss_responses.keys create), "
        "and sees only its owner's responses",
    )
    max_background_per_key: int = Field(
        64, ge=0, description="Background responses (queued or in progress) a key's owner may have at once, for keys "
        "created without --max-background; beyond, a 429 with Retry-After (keys mode; 0 = no limit)",
    )
    max_in_flight_per_key: int = Field(
        256, ge=0, description="Responses of any kind (streamed, waited for, background) queued or in progress a key's "
        "owner may have at once: streamed ones take workers as background ones do; beyond, a 429 with Retry-After "
        "(keys mode; 0 = no limit)",
    )
    max_streams_per_key: int = Field(
        256, ge=0, description="Event streams (SSE: a streamed create or GET ?stream=true; a WebSocket connection) a "
        "key's owner may hold open at once on one API process; beyond, a 429 too_many_streams with Retry-After "
        "(keys mode; 0 = no limit)",
    )
    background_limit_retry_after_seconds: int = Field(
        5, ge=0, description="Retry-After of a 429 refused for a key's background responses in flight"
    )

    # --- API ------------------------------------------------------------------
    api_host: str = Field("127.0.0.1", description="Where `python -m oss_responses.api` listens")
    api_port: int = Field(8000, ge=0, le=65535, description="Port of the API")
    api_processes: int = Field(
        1, ge=1, le=64,
        description="API processes sharing the port (uvicorn's workers): each relays its streams on its own core",
    )

    @field_validator("webhook_queue")
    @classmethod
    def _webhook_queue_apart(cls, queue: str, info: ValidationInfo) -> str:
        prefix = info.data.get("queue_prefix", "")
        models = {*info.data.get("models", []), info.data.get("worker_model", "")}
        if queue in {f"{prefix}{model}" for model in models}:
            raise ValueError(f"{queue!r} is a model's queue: deliveries and responses would be taken for each other")
        return queue

    @property
    def encryption_key_values(self) -> list[str]:
        return [key.get_secret_value() for key in self.encryption_keys]

    @property
    def celery_broker_url(self) -> str:
        return self.broker_url or self.redis_url

    def queue_for(self, model: str) -> str:
        return f"{self.queue_prefix}{model}"

    def stream_ttl_seconds(self, store: bool) -> int:
        """How long a response's ended stream is kept: a ``store: false`` one's, which no route reads once its
        own client read it, the shorter unstored TTL, whoever ends it."""
        return self.event_ttl_seconds if store else min(self.unstored_event_ttl_seconds, self.event_ttl_seconds)

    def output_tokens_ceiling(self, model: str) -> int:
        return self.max_output_tokens_ceilings.get(model, self.max_output_tokens_ceiling)

    def output_budget(self, model: str, requested: int | None) -> int:
        """The tokens a response may generate: what it asked (the API held that to the model's ceiling),
        else the default, which a model's lower ceiling also bounds (a request could not ask for more)."""
        return requested or min(self.default_max_output_tokens, self.output_tokens_ceiling(model))


class InvalidSettings(SystemExit):
    """The environment's settings cannot be used: every command stops at once, one line per bad variable,
    rather than with a traceback, or later, in a request or a task, with something else to blame."""


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    try:
        return Settings()
    except ValidationError as exc:
        lines = [f"{_variable(error['loc'])}: {error['msg']}" for error in exc.errors()]
    except SettingsError as exc:  # a list or mapping that is not JSON
        field = re.search(r'field "(\w+)"', str(exc))
        lines = [f"{_variable((field[1],)) if field else exc}: not JSON ({exc.__cause__})"]
    raise InvalidSettings("oss-responses: invalid settings\n  " + "\n  ".join(lines))


def _variable(location: tuple[int | str, ...]) -> str:
    """``("webhook_endpoints", 0, "secret")`` → ``OSS_RESPONSES_WEBHOOK_ENDPOINTS[0].secret``."""
    name, *inner = location
    return "OSS_RESPONSES_" + str(name).upper() + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in inner)
