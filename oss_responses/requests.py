"""The create-response request body, validated.

openai's request types are TypedDicts that pydantic validates loosely (unknown keys dropped, tools
checked lazily), so the body is validated here: top-level fields strictly (an unknown field is a
400, as OpenAI answers), input items (``request_items.py``), tools (``request_tools.py``) and
``tool_choice`` (``request_tool_choice.py``) each by its own module.
"""

from __future__ import annotations

from functools import cache
from typing import Annotated, Any, Literal

from openai.types.responses import EasyInputMessage, ResponseFormatTextJSONSchemaConfig, ResponseIncludable
from openai.types.responses.response_create_params import ResponseCreateParamsBase
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from oss_responses.errors import BadRequest
from oss_responses.request_items import MAX_INPUT_TEXT, InputItem, check_unique_ids, parse_input_item
from oss_responses.request_tool_choice import check_choice_offered, parse_tool_choice
from oss_responses.request_tools import RequestTool, check_name, parse_tool
from oss_responses.schema_shape import schema_problem
from oss_responses.strict_schema import object_root_problem, strict_problem
from oss_responses.validation_errors import M, openai_error, too_long, validate_one

# OpenAI's metadata: at most 16 pairs, keys up to 64 characters, values up to 512.
Metadata = Annotated[
    dict[Annotated[str, StringConstraints(max_length=64)], Annotated[str, StringConstraints(max_length=512)]],
    Field(max_length=16),
]

# OpenAI's efforts; gpt-oss has low, medium and high, and render maps the others to the nearest.
ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]


class Reasoning(BaseModel):
    model_config = ConfigDict(extra="forbid")
    effort: ReasoningEffort | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None
    # Accepted, and echoed as what gpt-oss runs (api/queued.py): it has one mode, and earlier turns'
    # reasoning is left out of its prompt, as harmony prescribes.
    context: Literal["auto", "current_turn", "all_turns"] | None = None
    mode: str | None = None


class TextFormat(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["text", "json_schema", "json_object"] = "text"

    @model_validator(mode="before")
    @classmethod
    def _json_schema(cls, value: Any) -> Any:
        """A ``json_schema`` format has its name and schema (openai's type says which fields it has)."""
        if isinstance(value, dict) and value.get("type") == "json_schema":
            config = validate_one(ResponseFormatTextJSONSchemaConfig, value, "text.format")
            check_name(config.name, "text.format.name")
            schema = config.schema_
            problem = schema_problem(schema) or (
                (object_root_problem(schema) or strict_problem(schema)) if config.strict else None)
            if problem is not None:
                raise BadRequest(f"Invalid schema for response_format '{config.name}': {problem}",
                                 param="text.format.schema", code="invalid_json_schema")
        return value


class TextConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class CreateResponseRequest(BaseModel):
    """``POST /v1/responses``. Unknown top-level fields are refused (OpenAI answers 400 too).

    Strict: ``"stream": "yes"`` or ``"max_output_tokens": "5"`` are type errors, as OpenAI answers.
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    model: str
    input: str | list[InputItem] = Field(default_factory=list)
    instructions: str | None = None
    tools: list[RequestTool] = Field(default_factory=list)
    tool_choice: Any = "auto"
    parallel_tool_calls: bool = True
    max_tool_calls: int | None = Field(None, ge=1)
    reasoning: Reasoning | None = None
    text: TextConfig | None = None
    max_output_tokens: int | None = Field(None, ge=16)  # OpenAI's minimum
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    seed: int | None = None
    metadata: Metadata | None = None
    previous_response_id: str | None = None
    # A conversation (``/v1/conversations``) whose items come before the input: its id, sent as a string or
    # as ``{"id": ...}``, kept as the id.
    conversation: str | None = None
    store: bool = True
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    background: bool = False
    include: list[ResponseIncludable] | None = None
    truncation: Literal["auto", "disabled"] | None = None
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    service_tier: Literal["auto", "default", "flex", "scale", "priority", "fast"] | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    prompt_cache_options: dict[str, Any] | None = None
    # Codex CLI's installation, session and turn ids: accepted, kept with the request, never echoed.
    client_metadata: dict[str, str] | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    # vLLM's extension: return the harmony messages as input_messages / output_messages.
    enable_response_messages: bool = False

    @field_validator("input", mode="before")
    @classmethod
    def _input(cls, value: Any) -> Any:
        if isinstance(value, str) and len(value) > MAX_INPUT_TEXT:
            raise too_long("input", MAX_INPUT_TEXT, len(value))
        if isinstance(value, str):
            return value
        if not isinstance(value, list):
            raise BadRequest("Invalid type for 'input': expected a string or an array of input items.", param="input")
        items = [parse_input_item(item, f"input[{i}]") for i, item in enumerate(value)]
        check_unique_ids(items, "input")
        return items

    @field_validator("tools", mode="before")
    @classmethod
    def _tools(cls, value: Any) -> Any:
        if not isinstance(value, list):
            raise BadRequest("Invalid type for 'tools': expected an array of tools.", param="tools")
        return [parse_tool(tool, f"tools[{i}]") for i, tool in enumerate(value)]

    @field_validator("tool_choice", mode="before")
    @classmethod
    def _tool_choice(cls, value: Any) -> Any:
        return parse_tool_choice(value)

    @field_validator("conversation", mode="before")
    @classmethod
    def _conversation(cls, value: Any) -> Any:
        if isinstance(value, dict) and isinstance(value.get("id"), str) and set(value) == {"id"}:
            return value["id"]
        if value is None or isinstance(value, str):
            return value
        raise BadRequest("Invalid type for 'conversation': expected a conversation id, or an object with its 'id'.",
                         param="conversation")

    @model_validator(mode="after")
    def _one_way_to_continue(self) -> CreateResponseRequest:
        if self.conversation is not None and self.previous_response_id is not None:
            raise BadRequest("Mutually exclusive parameters: Ensure you are only providing one of: "
                             "'previous_response_id' or 'conversation'.", param="conversation",
                             code="mutually_exclusive_parameters")
        return self

    @model_validator(mode="after")
    def _forced_tool_offered(self) -> CreateResponseRequest:
        check_choice_offered(self)
        return self

    def input_items(self) -> list[InputItem]:
        """``input`` as a list of items (a string is one user message)."""
        if isinstance(self.input, str):
            return [EasyInputMessage(role="user", content=self.input, type="message")]
        return list(self.input)


_adapter = TypeAdapter(CreateResponseRequest)


def parse_create_request(body: Any) -> CreateResponseRequest:
    """Validate a JSON body; every failure is a :class:`BadRequest` naming the parameter."""
    if isinstance(body, dict) and (unserved := [key for key in _unserved_parameters() if body.get(key) is not None]):
        # OpenAI's parameters this server has nothing behind (server-side compaction, stored prompts...):
        # "unknown" would tell the client it misspelled one.
        raise BadRequest(f"Unsupported parameter: '{unserved[0]}' is not supported by this server.",
                         param=unserved[0], code="unsupported_parameter")
    if isinstance(body, dict):
        body = {key: value for key, value in body.items() if key not in _unserved_parameters()}
    return parse_body(_adapter, body)


@cache
def _unserved_parameters() -> frozenset[str]:
    """The create parameters of openai's own type that the request model does not take."""
    return frozenset(ResponseCreateParamsBase.__annotations__) - set(CreateResponseRequest.model_fields)


def parse_body(adapter: TypeAdapter[M], body: Any) -> M:
    """A JSON body validated by ``adapter``; every failure is a :class:`BadRequest` naming the parameter."""
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object.")
    try:
        return adapter.validate_python(body)
    except ValidationError as exc:
        raise openai_error(body, exc) from exc
