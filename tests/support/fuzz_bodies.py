"""Hypothesis strategies for Responses create bodies: mostly well-formed, sometimes hostile.

Shapes follow OpenAI's request: input as a string or items (messages with text parts, replayed
assistant messages, reasoning, function calls and outputs, item references), tools (function, mcp,
code_interpreter, web_search_preview), text.format (text, json_object, json_schema), sampling fields.
Any value may be replaced by a hostile one (NUL, a lone surrogate, huge or non-integral numbers,
deep nesting, wrong types), and unknown fields appear, so the refusal paths are walked too.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

HOSTILE_STRINGS = st.sampled_from(["", "\u0000", "a\u0000b", "\ud800", "\udfff tail", "%2e%2e/", "\u202e", "x" * 5000])
HOSTILE_NUMBERS = st.sampled_from([0, -1, 2**53 + 1, 2**64, -(2**63), 10**30, 1e308, -1e-308, 0.5, True])

text = st.one_of(st.text(max_size=40), HOSTILE_STRINGS)
small_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=20)
identifier = st.from_regex(r"[A-Za-z_][A-Za-z0-9_-]{0,20}", fullmatch=True)


def hostile(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """The value mostly as given, sometimes something no schema allows."""
    anything = st.one_of(HOSTILE_STRINGS, HOSTILE_NUMBERS, st.none(), st.lists(st.integers(), max_size=2))
    return st.one_of(strategy, strategy, strategy, anything)


json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-1000, 1000),
                      st.floats(allow_nan=False, allow_infinity=False), small_text)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(small_text, inner, max_size=3)),
    max_leaves=12,
)


def _deep(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = [value]
    return value


# Deeper than the limit (64) but within what the client's json.dumps can write (~1,000;
# test_hostile_input.py goes deeper).
deep_value = st.integers(min_value=50, max_value=900).map(_deep)

input_text_part = st.fixed_dictionaries({"type": st.just("input_text"), "text": text})
output_text_part = st.fixed_dictionaries({"type": st.just("output_text"), "text": text})
other_part = st.fixed_dictionaries({"type": st.sampled_from(["input_image", "input_file", "refusal", "bogus"])})

user_message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "system", "developer"]),
     "content": st.one_of(text, st.lists(st.one_of(input_text_part, other_part), max_size=3))},
    optional={"type": st.just("message")},
)
assistant_message = st.fixed_dictionaries(
    {"type": st.just("message"), "role": st.just("assistant"),
     "content": st.lists(output_text_part, min_size=1, max_size=2)},
    optional={"id": st.from_regex(r"msg_[a-z0-9]{4,12}", fullmatch=True), "status": st.just("completed")},
)
reasoning_item = st.fixed_dictionaries(
    {"type": st.just("reasoning"),
     "summary": st.lists(st.fixed_dictionaries({"type": st.just("summary_text"), "text": text}), max_size=2)},
    optional={"content": st.lists(st.fixed_dictionaries({"type": st.just("reasoning_text"), "text": text}), max_size=2),
              "encrypted_content": text},
)
# One call_id shared often enough that an output finds its call and gets past the render.
call_id = st.one_of(identifier, st.just("call_fuzz"))
function_call = st.fixed_dictionaries(
    {"type": st.just("function_call"), "call_id": call_id, "name": identifier, "arguments": text},
)
output_part = st.one_of(
    input_text_part,
    st.fixed_dictionaries({"type": st.just("input_image")},
                          optional={"image_url": text, "file_id": small_text,
                                    "detail": st.sampled_from(["low", "high", "auto", "original"])}),
    st.fixed_dictionaries({"type": st.just("input_file")},
                          optional={"filename": text, "file_data": text, "file_id": small_text, "file_url": text}),
    other_part,
)
function_call_output = st.fixed_dictionaries(
    {"type": st.just("function_call_output"), "call_id": call_id,
     "output": st.one_of(text, st.lists(output_part, max_size=3))},
)
item_reference = st.fixed_dictionaries({"type": st.just("item_reference"), "id": text})
# A "type" that is no string (a list cannot even be looked up in a dict: that was a 500).
odd_typed = st.fixed_dictionaries({"type": json_value}, optional={"role": st.just("user"), "content": json_value})
input_item = st.one_of(user_message, assistant_message, reasoning_item, function_call, function_call_output,
                       item_reference, odd_typed, st.dictionaries(small_text, json_value, max_size=3))

function_tool = st.fixed_dictionaries(
    {"type": st.just("function"), "name": identifier},
    optional={"parameters": st.one_of(json_value, deep_value,
                                      st.just({"type": "object", "properties": {"x": {"type": "string"}}})),
              "strict": st.booleans(), "description": text},
)
mcp_tool = st.fixed_dictionaries(
    {"type": st.just("mcp"), "server_label": st.one_of(identifier, text)},
    optional={"server_url": st.one_of(text, st.sampled_from([
        "https://allowed.example/mcp/../admin", "http://127.0.0.1:1/mcp", "http://[::1]/mcp", "https://u:p@h/mcp",
        "http://2130706433/mcp", "https://calc.example/mcp"])),
        "require_approval": st.sampled_from(["always", "never"]), "allowed_tools": st.lists(identifier, max_size=2),
        "authorization": text, "headers": st.dictionaries(identifier, text, max_size=2)},
)
hosted_tool = st.fixed_dictionaries(
    {"type": st.sampled_from(["code_interpreter", "web_search_preview", "file_search"])},
    optional={"container": st.just({"type": "auto"})},
)
tool = st.one_of(function_tool, mcp_tool, hosted_tool, st.fixed_dictionaries({"type": json_value, "name": identifier}))

text_format = st.one_of(
    st.fixed_dictionaries({"type": st.just("text")}),
    st.fixed_dictionaries({"type": st.just("json_object")}),
    st.fixed_dictionaries(
        {"type": st.just("json_schema"), "name": identifier,
         "schema": st.one_of(json_value, deep_value,
                             st.just({"type": "object", "properties": {"a": {"type": "integer"}},
                                      "required": ["a"], "additionalProperties": False}))},
        optional={"strict": st.booleans()},
    ),
    st.dictionaries(small_text, json_value, max_size=2),
)

clean_message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "system", "developer"]),
     "content": st.one_of(small_text,
                          st.lists(st.fixed_dictionaries({"type": st.just("input_text"), "text": small_text}),
                                   min_size=1, max_size=2))},
    optional={"type": st.just("message")},
)
clean_items = st.lists(st.one_of(clean_message, assistant_message.map(lambda m: {**m, "content": [
    {"type": "output_text", "text": "earlier answer"}]})), min_size=1, max_size=4)
# A user's question, the model's call and the function's answer, as text or as parts of any kind.
clean_tool_turn = st.tuples(
    clean_message,
    st.just({"type": "function_call", "call_id": "call_fuzz", "name": "f", "arguments": "{}"}),
    st.fixed_dictionaries({"type": st.just("function_call_output"), "call_id": st.just("call_fuzz"),
                           "output": st.one_of(small_text, st.lists(output_part, min_size=1, max_size=3))}),
).map(list)
clean_function_tool = st.fixed_dictionaries(
    {"type": st.just("function"), "name": identifier,
     "parameters": st.just({"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"],
                            "additionalProperties": False})},
    optional={"strict": st.booleans(), "description": small_text},
)
# json_object is not here: its input must say "json" (OpenAI's rule), which the generated text does not.
clean_format = st.sampled_from([
    {"type": "text"},
    {"type": "json_schema", "name": "answer", "strict": True, "schema": {
        "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": False}},
])


def _body(wrap: Any, some_text: st.SearchStrategy[str], some_items: st.SearchStrategy[Any],
          some_tool: st.SearchStrategy[Any], some_format: st.SearchStrategy[Any], extra: dict[str, Any]) -> Any:
    return st.fixed_dictionaries(
        {"model": wrap(st.sampled_from(["gpt-oss-20b", "gpt-oss-20b", "gpt-oss-120b-unknown"]))
         if wrap is hostile else st.just("gpt-oss-20b"),
         "input": wrap(st.one_of(some_text, some_items))},
        optional={
            "background": wrap(st.booleans()),
            "stream": wrap(st.booleans()),
            "instructions": wrap(some_text),
            "tools": wrap(st.lists(some_tool, max_size=3)),
            "tool_choice": wrap(st.sampled_from(["auto", "none"])),
            "text": wrap(st.fixed_dictionaries({}, optional={"format": some_format,
                                                             "verbosity": st.sampled_from(["low", "high"])})),
            "max_output_tokens": wrap(st.integers(1, 64)),
            "temperature": wrap(st.floats(0, 2)),
            "top_p": wrap(st.floats(0, 1)),
            "max_tool_calls": wrap(st.integers(1, 5)),
            "metadata": wrap(st.dictionaries(small_text, small_text, max_size=3)),
            "reasoning": wrap(
                st.fixed_dictionaries({}, optional={"effort": st.sampled_from(["low", "medium", "high"])})
            ),
            "seed": wrap(st.integers(0, 2**32)),
            **extra,
        },
    )


def _as_is(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return strategy


# Half the bodies are well-formed (they run on the worker), half carry something hostile anywhere.
well_formed_body = _body(_as_is, small_text, st.one_of(clean_items, clean_tool_turn), clean_function_tool,
                         clean_format, {})
hostile_body = _body(hostile, text, st.lists(input_item, max_size=4), tool, text_format, {
    "store": hostile(st.booleans()),
    "top_logprobs": hostile(st.integers(0, 20)),
    "previous_response_id": hostile(st.from_regex(r"resp_[a-z0-9]{1,12}", fullmatch=True)),
    "include": hostile(
        st.lists(st.sampled_from(["reasoning.encrypted_content", "message.output_text.logprobs"]), max_size=2)
    ),
    "bogus_field": json_value,
})
create_body = st.one_of(well_formed_body, hostile_body)
