"""The OpenAPI document describes the real request bodies.

The POST routes read their body themselves (``api/body.py``: size, depth and character checks come
before validation, and the errors are OpenAI's), so FastAPI sees no body parameter; each route
attaches its JSON schema through ``openapi_extra`` instead, and the schemas' ``$defs`` join the
document's components when it is built (the create body's parts that compact and input_tokens take are
components too, so that no schema is generated while the routes are declared: that took ~0.1 s of
every API process's start). Behaviour does not change; clients and fuzzers
(``tests/api/test_fuzz.py``) get a document that says what the service accepts.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from oss_responses.requests import CreateResponseRequest

_REF = "#/components/schemas/{model}"
CREATE_SCHEMA_NAME = "CreateResponseRequest"
_SUBSETS: dict[str, tuple[str, ...]] = {}  # component name -> the create body's fields it keeps


@cache
def _create_schema() -> dict[str, Any]:
    return CreateResponseRequest.model_json_schema(ref_template=_REF)


def _definitions() -> dict[str, Any]:
    subsets = {title: _subset(fields, title) for title, fields in _SUBSETS.items()}
    return dict(_create_schema().get("$defs", {})) | {CREATE_SCHEMA_NAME: _without_defs(_create_schema())} | subsets


def _without_defs(schema: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in schema.items() if key != "$defs"}


def _subset(fields: tuple[str, ...], title: str) -> dict[str, Any]:
    """The create body restricted to ``fields`` (compact and input_tokens take a part of it)."""
    create = _create_schema()
    properties = {key: value for key, value in create["properties"].items() if key in fields}
    required = [key for key in create.get("required", []) if key in fields]
    return {"title": title, "type": "object", "properties": properties, "required": required,
            "additionalProperties": create.get("additionalProperties", False)}


def json_body(schema: dict[str, Any]) -> dict[str, Any]:
    """``openapi_extra`` of a route reading a JSON body of this schema."""
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def create_body() -> dict[str, Any]:
    return json_body({"$ref": _REF.format(model=CREATE_SCHEMA_NAME)})


def subset_body(fields: tuple[str, ...], title: str) -> dict[str, Any]:
    """A body of the create body's ``fields``: component ``title``, built with the document."""
    _SUBSETS[title] = fields
    return json_body({"$ref": _REF.format(model=title)})


def install_openapi(app: FastAPI) -> None:
    """Build the document once, on first request, with the request schemas among its components."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(title=app.title, version=app.version, routes=app.routes)
            components = document.setdefault("components", {}).setdefault("schemas", {})
            components.update(_definitions())
            app.openapi_schema = document
        return app.openapi_schema

    # FastAPI's documented way to extend the document is replacing this method; its type says method.
    app.openapi = openapi  # type: ignore[method-assign]
