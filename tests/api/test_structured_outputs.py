"""Structured outputs (``text.format``) through the whole service: an API process, a Celery worker
process with the scripted engine, and the official SDK's ``parse()`` and ``stream()`` helpers, on
SQLite and on PostgreSQL (the stored Response must keep ``schema`` under its wire name)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import httpx2
import jsonschema
import pytest
from openai import OpenAI
from pydantic import BaseModel
from support import MODEL
from support.processes import start_api_process, start_worker_process, stop_process

from oss_responses.config import Settings


class Step(BaseModel):
    explanation: str
    output: str


class MathReasoning(BaseModel):
    steps: list[Step]
    final_answer: str
    confident: bool
    unit: Literal["m", "s"] | None


ANSWER_SCHEMA = {
    "type": "object", "additionalProperties": False, "required": ["city", "when", "temperature"],
    "properties": {
        "city": {"type": "string", "enum": ["Paris", "Oslo"]},
        "when": {"type": "string", "format": "date"},
        "temperature": {"type": "number", "minimum": -40, "maximum": 50},
    },
}
ANSWER_FORMAT = {"type": "json_schema", "name": "weather", "strict": True, "schema": ANSWER_SCHEMA}


@dataclass
class Stack:
    client: OpenAI
    base_url: str


@pytest.fixture(scope="module")
def stack(stack_database_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    settings = Settings(database_url=stack_database_url, redis_url=redis_url, models=[MODEL])
    logs = tmp_path_factory.mktemp("structured-logs")
    processes = []
    try:
        processes.append(start_worker_process(settings, logs / "worker.log"))
        api, base_url = start_api_process(settings, logs / "api.log")
        processes.append(api)
        with OpenAI(base_url=f"{base_url}/v1", api_key="test", max_retries=0, timeout=30) as client:
            yield Stack(client=client, base_url=base_url)
    finally:
        for process in reversed(processes):
            stop_process(process)
        for path in sorted(Path(logs).glob("*.log")):
            print(f"--- {path.name}\n{path.read_text(errors='replace')[-4000:]}")


def test_parse_returns_instance_of_pydantic_model(stack: Stack) -> None:
    response = stack.client.responses.parse(model=MODEL, input="solve 8x + 7 = -23", text_format=MathReasoning)
    assert response.status == "completed"
    assert isinstance(response.output_parsed, MathReasoning)
    assert response.output_parsed.steps and response.output_parsed.final_answer == "solve 8x + 7 = -23"


def test_retrieve_json_schema_response_returns_schema(stack: Stack) -> None:
    created = stack.client.responses.create(model=MODEL, input="weather?", text={"format": ANSWER_FORMAT})
    body = httpx2.get(f"{stack.base_url}/v1/responses/{created.id}", timeout=10).json()
    assert body["status"] == "completed"
    assert body["text"]["format"]["schema"] == ANSWER_SCHEMA and "schema_" not in body["text"]["format"]
    jsonschema.validate(json.loads(created.output_text), ANSWER_SCHEMA, format_checker=jsonschema.FormatChecker())


def test_background_json_schema_response_completes(stack: Stack) -> None:
    created = stack.client.responses.create(model=MODEL, input="weather?", text={"format": ANSWER_FORMAT},
                                            background=True)
    with stack.client.responses.stream(response_id=created.id) as stream:
        final = stream.get_final_response()
    assert final.status == "completed"
    jsonschema.validate(json.loads(final.output_text), ANSWER_SCHEMA)


def test_stream_with_json_schema_parses_final_response(stack: Stack) -> None:
    with stack.client.responses.stream(model=MODEL, input="solve it", text_format=MathReasoning) as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert events[-1].type == "response.completed"
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert MathReasoning.model_validate_json(text) == final.output_parsed


def test_create_json_object_response_is_a_json_object(stack: Stack) -> None:
    response = stack.client.responses.create(model=MODEL, input="hello json", text={"format": {"type": "json_object"}})
    assert response.status == "completed" and json.loads(response.output_text) == {"answer": "hello json"}
