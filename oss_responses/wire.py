"""openai models as JSON, spelled as on the wire: the one way to dump them for storage and clients.

openai's types rename Python-reserved or shadowing fields (``schema_`` is ``schema``, ``async_`` is
``async``); a dump without ``by_alias`` writes the Python names, which the same types then refuse
to load (a stored json_schema Response could not be read back). Everything stored or sent goes
through here so that no dump can forget it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


def wire_json(model: BaseModel, *, exclude_none: bool = False) -> dict[str, Any]:
    """The model's JSON-compatible dict under its wire field names."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=exclude_none)
