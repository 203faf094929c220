"""The create-response request body, validated.

openai's request types are TypedDicts that pydantic validates loosely (unknown keys dropped, tools
checked lazily), so the body is validated here: top-level fields strictly (an unknown field is a
400, as OpenAI answers), input items and tools with openai's own pydantic models, dispatched on
``type`` so that an error names one model, not fifty.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Annotated, Any, Literal, TypeVar

from openai.types.responses import (
    EasyInputMessage,
    FunctionTool,
    NamespaceTool,
    ResponseCodeInterpreterToolCall,
    ResponseCompactionItemParam,
    ResponseFormatTextJSONSchemaConfig,
    ResponseFunctionToolCall,
    ResponseFunctionWebSearch,
    ResponseIncludable,
    ResponseOutputMessage,
    ResponseReasoningItem,
    WebSearchPreviewTool,
    WebSearchTool,
)
from openai.types.responses.response_create_params import ResponseCreateParamsBase
from openai.types.responses.response_input_item import (
    FunctionCallOutput,
    ItemReference,
    McpApprovalRequest,
    McpApprovalResponse,
    McpCall,
    McpListTools,
    Message,
)
from openai.types.responses.tool import CodeInterpreter, Mcp
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
from oss_responses.harmony.builtin_tools import TOOL_TYPES
from oss_responses.harmony.ids import new_id
from oss_responses.harmony.mcp_tools import MCP_TOOL_NAME, MCP_TOOL_NAME_PATTERN
from oss_responses.harmony.tool_choice import (
    ALLOWED_TOOLS,
    allows,
    forced_tool_missing,
)
from oss_responses.schema_shape import schema_problem
from oss_responses.strict_schema import object_root_problem, strict_problem
from oss_responses.validation_errors import openai_error, too_long

InputItem = (
    EasyInputMessage
    | Message
    | ResponseOutputMessage
    | ResponseReasoningItem
    | ResponseFunctionToolCall
    | FunctionCallOutput
    | McpCall
    | ResponseFunctionWebSearch
    | ResponseCodeInterpreterToolCall
    | McpListTools
    | McpApprovalRequest
    | McpApprovalResponse
    | ItemReference
    | ResponseCompactionItemParam
)
RequestTool = FunctionTool | NamespaceTool | Mcp | CodeInterpreter | WebSearchPreviewTool | WebSearchTool
M = TypeVar("M", bound=BaseModel)

# OpenAI's metadata: at most 16 pairs, keys up to 64 characters, values up to 512.
Metadata = Annotated[
    dict[Annotated[str, StringConstraints(max_length=64)], Annotated[str, StringConstraints(max_length=512)]],
    Field(max_length=16),
]

# OpenAI's rule for the names of functions and response formats. Here it also keeps harmony's headers
# whole: a function's name, a namespace's or an MCP server's label is the recipient ``to=NAMESPACE.NAME``,
# and a space or a dot in it would end or split that recipient.
NAME_PATTERN = "^[a-zA-Z0-9_-]+$"
NAME_MAX_LENGTH = 64
_NAME = re.compile(NAME_PATTERN)

# The ``include`` value asking for reasoning items' sealed harmony messages (stateless multi-turn).
REASONING_ENCRYPTED_CONTENT = "reasoning.encrypted_content"

_TOOL_MODELS: dict[str, type[RequestTool]] = {
    "function": FunctionTool,
    "namespace": NamespaceTool,
    "mcp": Mcp,
    "code_interpreter": CodeInterpreter,
    "web_search_preview": WebSearchPreviewTool,
    "web_search_preview_2025_03_11": WebSearchPreviewTool,
    "web_search": WebSearchTool,
    "web_search_2025_08_26": WebSearchTool,
}

_ITEM_MODELS: dict[str, type[InputItem]] = {
    "reasoning": ResponseReasoningItem,
    "function_call": ResponseFunctionToolCall,
    "function_call_output": FunctionCallOutput,
    "mcp_call": McpCall,
    "web_search_call": ResponseFunctionWebSearch,
    "code_interpreter_call": ResponseCodeInterpreterToolCall,
    "mcp_list_tools": McpListTools,
    "mcp_approval_request": McpApprovalRequest,
    "mcp_approval_response": McpApprovalResponse,
    "item_reference": ItemReference,
    "compaction": ResponseCompactionItemParam,
}


def _message_model(item: dict[str, Any]) -> type[EasyInputMessage | Message | ResponseOutputMessage]:
    """A ``type: message`` item is one of three shapes; pick by role and content."""
    content = item.get("content")
    if item.get("role") == "assistant" and "id" in item and isinstance(content, list):
        return ResponseOutputMessage
    if isinstance(content, str):
        return EasyInputMessage
    if item.get("role") in ("user", "system", "developer") and "type" in item:
        return Message
    return EasyInputMessage


_OUTPUT_PARTS = frozenset({"output_text", "refusal"})


def _is_output_content(content: Any) -> bool:
    return isinstance(content, list) and bool(content) and all(
        isinstance(part, dict) and _type_of(part) in _OUTPUT_PARTS for part in content
    )


def _output_part(part: dict[str, Any]) -> dict[str, Any]:
    return {"annotations": [], **part} if part["type"] == "output_text" else part


_TEXT_PARTS = frozenset({"input_text", "output_text", "refusal"})
MAX_INPUT_TEXT = 10_485_760  # OpenAI's longest `input` string or text part, in characters


def _check_text_parts(content: Any, param: str) -> None:
    """gpt-oss reads text only: an image, file or audio part is refused by name, not by a union error."""
    if not isinstance(content, list):
        return
    for index, part in enumerate(content):
        kind = _type_of(part) if isinstance(part, dict) else None
        if kind not in _TEXT_PARTS:
            raise BadRequest(
                f"Invalid value for '{param}.content[{index}].type': {kind!r} content is not supported by gpt-oss, "
                "which reads text only.",
                param=f"{param}.content[{index}]",
                code="unsupported_value",
            )
        if isinstance(text := part.get("text"), str) and len(text) > MAX_INPUT_TEXT:
            raise too_long(f"{param}.content[{index}].text", MAX_INPUT_TEXT, len(text))


def _type_of(value: dict[str, Any], default: str | None = None) -> str | None:
    """The ``type`` of an item, part or tool; anything but a string is no type (and cannot be a dict key)."""
    kind = value.get("type")
    if kind is None:  # left out, or null: the SDK's TypedDicts mark several types Optional
        kind = default
    return kind if isinstance(kind, str) else None


def normalise_input_item(item: dict[str, Any]) -> dict[str, Any]:
    """Fill what OpenAI lets a client leave out of replayed history, so one model describes each item.

    Clients replay assistant messages as ``output_text`` parts without ``id``/``status``/``annotations``
    and reasoning items without ``id``/``summary``, and an item reference may be its ``id`` alone (openai's
    ``ItemReference`` type: ``type`` optional); the filled form is what is stored.
    """
    if item.get("type") is None and set(item) <= {"id", "type"} and isinstance(item.get("id"), str):
        return {"type": "item_reference", "id": item["id"]}
    kind = _type_of(item, "message")
    if kind == "message" and item.get("role") == "assistant" and _is_output_content(item.get("content")):
        content = [_output_part(part) for part in item["content"]]
        return {**item, "type": "message", "id": item.get("id") or new_id("msg"),
                "status": item.get("status") or "completed", "content": content}
    if kind == "reasoning":
        return {**item, "id": item.get("id") or new_id("rs"), "summary": item.get("summary") or []}
    return item


def check_name(name: str, param: str) -> None:
    """A function's, namespace's, MCP server's or response format's name, as OpenAI checks it."""
    if len(name) > NAME_MAX_LENGTH:
        raise too_long(param, NAME_MAX_LENGTH, len(name))
    if not _NAME.match(name):
        raise _mismatch(param, NAME_PATTERN)


def _mismatch(param: str, pattern: str) -> BadRequest:
    """OpenAI's words for a string outside its pattern."""
    return BadRequest(f"Invalid '{param}': string does not match pattern. Expected a string that matches the "
                      f"pattern '{pattern}'.", param=param, code="invalid_value")


def _validate_one(model: type[M], value: Any, param: str) -> M:
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        raise openai_error(value, exc, param) from exc


def parse_input_item(value: Any, param: str) -> InputItem:
    if not isinstance(value, dict):
        raise BadRequest(f"Invalid value for '{param}': expected an object.", param=param)
    value = normalise_input_item(value)
    item_type = _type_of(value, "message")
    if item_type == "message":
        _check_text_parts(value.get("content"), param)
        return _validate_one(_message_model(value), value, param)
    model = _ITEM_MODELS.get(item_type) if item_type is not None else None
    if model is None:
        raise BadRequest(
            f"Invalid value for '{param}.type': input items of type {value.get('type')!r} "
            "are not supported by gpt-oss.",
            param=f"{param}.type",
            code="unsupported_value",
        )
    return _validate_one(model, value, param)


def parse_tool(value: Any, param: str) -> RequestTool:
    if not isinstance(value, dict):
        raise BadRequest(f"Invalid value for '{param}': expected an object.", param=param)
    tool_type = _type_of(value, "")
    model = _TOOL_MODELS.get(tool_type) if tool_type is not None else None
    if model is None:
        raise BadRequest(
            f"Invalid value for '{param}.type': tools of type '{value.get('type')}' are not supported "
            f"(supported: {', '.join(_TOOL_MODELS)}).",
            param=f"{param}.type",
            code="unsupported_value",
        )
    tool = _validate_one(model, value, param)
    _check_tool_names(tool, param)
    if isinstance(tool, FunctionTool):
        _check_parameters(tool.name, tool.parameters, tool.strict, f"{param}.parameters")
    if isinstance(tool, NamespaceTool):
        for index, function in enumerate(tool.tools):
            strict = getattr(function, "strict", None)
            _check_parameters(function.name, getattr(function, "parameters", None), strict,
                              f"{param}.tools[{index}].parameters")
    return tool


def _check_parameters(name: str, parameters: Any, strict: bool | None, param: str) -> None:
    """OpenAI's checks of a function's parameters: an object schema, and a strict one in the strict subset."""
    problem = (schema_problem(parameters) or object_root_problem(parameters)
               or (strict_problem(parameters) if strict else None))
    if problem is not None:
        raise BadRequest(f"Invalid schema for function '{name}': {problem}", param=param,
                         code="invalid_function_parameters")


def _check_tool_names(tool: RequestTool, param: str) -> None:
    if isinstance(tool, FunctionTool | NamespaceTool):
        check_name(tool.name, f"{param}.name")
    if isinstance(tool, NamespaceTool):
        for index, function in enumerate(tool.tools):
            check_name(function.name, f"{param}.tools[{index}].name")
    if isinstance(tool, Mcp):
        check_name(tool.server_label, f"{param}.server_label")


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
            config = _validate_one(ResponseFormatTextJSONSchemaConfig, value, "text.format")
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
        return [parse_input_item(item, f"input[{i}]") for i, item in enumerate(value)]

    @field_validator("tools", mode="before")
    @classmethod
    def _tools(cls, value: Any) -> Any:
        if not isinstance(value, list):
            raise BadRequest("Invalid type for 'tools': expected an array of tools.", param="tools")
        return [parse_tool(tool, f"tools[{i}]") for i, tool in enumerate(value)]

    @field_validator("tool_choice", mode="before")
    @classmethod
    def _tool_choice(cls, value: Any) -> Any:
        # A forcing choice is honoured by writing the start of the call for the model
        # (harmony/render.py: forced_call_header); harmony has no other switch.
        if value in ("auto", "none", "required"):
            return value
        kind = value.get("type") if isinstance(value, dict) else None
        if kind == ALLOWED_TOOLS:
            return _allowed_tools_choice(value)
        if kind in _CHOICE_KEYS:
            return _named_choice(value, kind)
        if isinstance(kind, str):
            raise BadRequest(f"Invalid value for 'tool_choice.type': '{kind}' is not available on this server.",
                             param="tool_choice.type", code="unsupported_value")
        raise BadRequest("Invalid value for 'tool_choice': expected 'auto', 'none', 'required' or a tool choice "
                         "object.", param="tool_choice", code="invalid_value")

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
        choice = self.tool_choice
        if isinstance(choice, dict) and choice["type"] == ALLOWED_TOOLS:
            _check_allowed_tools(choice["tools"], self.tools)
        if isinstance(choice, dict) and choice["type"] == "mcp" and "server_label" not in choice:
            self.tool_choice = _only_server(choice, self.tools)
        if isinstance(choice, dict) and choice["type"] == "mcp" and isinstance(choice.get("name"), str):
            _check_mcp_tool_name(choice["name"], "tool_choice.name")
        if (missing := forced_tool_missing(self)) is not None:
            raise BadRequest(f"Invalid value for 'tool_choice': {missing}", param="tool_choice")
        return self

    def input_items(self) -> list[InputItem]:
        """``input`` as a list of items (a string is one user message)."""
        if isinstance(self.input, str):
            return [EasyInputMessage(role="user", content=self.input, type="message")]
        return list(self.input)


_adapter = TypeAdapter(CreateResponseRequest)


class _Included(BaseModel):
    """``include`` alone, checked as a create request's is (``GET /v1/responses/{id}`` takes it in its query)."""

    model_config = ConfigDict(strict=True)

    include: list[ResponseIncludable]


_included_adapter = TypeAdapter(_Included)


def parse_include(values: list[str]) -> list[ResponseIncludable]:
    """A query's ``include`` values, refused as a create's are: a 400 ``invalid_value`` naming ``include[i]``."""
    return parse_body(_included_adapter, {"include": values}).include


# A choice naming one tool: its required keys, then its optional ones.
_CHOICE_KEYS: dict[str, tuple[set[str], set[str]]] = {
    "function": ({"type", "name"}, set()),
    # server_label may be left out when the request has one MCP tool (the Agents SDK's tool_choice="mcp").
    "mcp": ({"type"}, {"server_label", "name"}),
    **{kind: ({"type"}, set()) for kind in TOOL_TYPES},
}
_ALLOWED_ENTRY_KEYS = {"function": {"type", "name"}, "namespace": {"type", "name"}, "mcp": {"type", "server_label"}}


def _allowed_tools_choice(value: dict[str, Any]) -> dict[str, Any]:
    """``{"type": "allowed_tools", "mode", "tools"}`` checked for shape (``tools`` is matched to the
    request's tools once they are parsed)."""
    if set(value) - {"type", "mode", "tools"} or value.get("mode") not in ("auto", "required"):
        raise BadRequest("Invalid value for 'tool_choice': allowed_tools has a 'mode' ('auto' or 'required') "
                         "and 'tools'.", param="tool_choice", code="invalid_value")
    entries = value.get("tools")
    if not isinstance(entries, list) or not entries:
        raise BadRequest("Invalid value for 'tool_choice.tools': expected a non-empty array of tools.",
                         param="tool_choice.tools", code="invalid_value")
    for index, entry in enumerate(entries):
        kind = entry.get("type") if isinstance(entry, dict) else None
        keys = _ALLOWED_ENTRY_KEYS.get(kind, {"type"}) if isinstance(kind, str) else None
        if keys is None or set(entry) != keys or not all(isinstance(entry[key], str) for key in keys):
            raise BadRequest(
                f"Invalid value for 'tool_choice.tools[{index}]': a function or namespace is named by 'name', an "
                "MCP server by 'server_label', a hosted tool by its 'type' alone.",
                param=f"tool_choice.tools[{index}]", code="invalid_value",
            )
    return value


def _named_choice(value: dict[str, Any], kind: str) -> dict[str, Any]:
    required, optional = _CHOICE_KEYS[kind]
    keys = set(value)
    if not required <= keys or keys - required - optional or not all(isinstance(v, str) for v in value.values()):
        listed = ", ".join(f"'{key}'" for key in sorted(required | optional))
        raise BadRequest(f"Invalid value for 'tool_choice': a {kind} choice has {listed} (strings).",
                         param="tool_choice", code="invalid_value")
    return value


def _check_mcp_tool_name(name: str, param: str) -> None:
    if not MCP_TOOL_NAME.match(name):
        raise _mismatch(param, MCP_TOOL_NAME_PATTERN)


def _only_server(choice: dict[str, Any], tools: list[Any]) -> dict[str, Any]:
    servers = [tool.server_label for tool in tools if isinstance(tool, Mcp)]
    if len(servers) != 1:
        raise BadRequest(f"Missing required parameter: 'tool_choice.server_label' (the request has {len(servers)} "
                         "MCP tools).", param="tool_choice.server_label", code="missing_required_parameter")
    return {**choice, "server_label": servers[0]}


def _check_allowed_tools(entries: list[dict[str, Any]], tools: list[Any]) -> None:
    for index, entry in enumerate(entries):
        if not any(allows(entry, tool) for tool in tools):
            raise BadRequest(f"Invalid value for 'tool_choice.tools[{index}]': no such tool in 'tools'.",
                             param=f"tool_choice.tools[{index}]", code="invalid_value")


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
