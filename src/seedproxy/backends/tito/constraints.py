"""Structured output asked by a chat request, checked, for token-prompt requests.

Invariants:
- At most one constraint: ``regex``, ``ebnf``, ``json_schema`` or a ``response_format``
  other than ``text``; two are a 400 naming the second (SGLang: "Only one of regex,
  json_schema, or ebnf can be set").
- ``response_format`` is kept as the kind asked (``json_object``, or ``json_schema`` with
  its ``json_schema`` object), so each dialect maps it as its own chat route does:
  SGLang turns ``json_object`` into the schema ``{"type": "object"}`` and a schema into
  ``json.dumps(schema)``; vLLM's completions take ``response_format`` as its chat does.
- A ``regex`` must compile with Python's ``re`` (a 400 naming it otherwise), so an
  upstream's refusal of it never uses an index.
- ``structural_tag`` and other kinds are a 400: no dialect here reproduces them exactly.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from ...errors import BadRequest

__all__ = ["Constraint", "check_regex", "constraint_of"]

_GRAMMARS = ("regex", "ebnf", "json_schema")


@dataclass(frozen=True, slots=True)
class Constraint:
    field: str
    """The request field that asked: ``regex``, ``ebnf``, ``json_schema`` or
    ``response_format``."""
    source: str
    """The grammar, or the JSON schema as SGLang's chat route writes it."""
    response_format: dict[str, Any] | None = None
    """For ``response_format``: ``{"type": "json_object"}`` or ``{"type": "json_schema",
    "json_schema": {...as sent}}``."""


def check_regex(pattern: str, param: str) -> None:
    """A 400 naming ``param`` unless Python's ``re`` compiles ``pattern``: checked before
    the slot, so the upstream's own refusal never uses an index. ``re`` raises
    ``re.error``, ``OverflowError`` for a repeat count past its range, and
    ``RecursionError`` for groups nested past the recursion limit."""
    try:
        re.compile(pattern)
    except (re.error, OverflowError, RecursionError) as exc:
        shown = pattern if len(pattern) <= 64 else pattern[:64] + "..."
        raise BadRequest(f"{param} {shown!r} is not a valid regex: {exc}",
                         param=param) from None


def _schema_text(value: Any, field: str) -> str:
    """A schema given inline (an object) or as JSON text; the text SGLang would send."""
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except (RecursionError, ValueError):  # past json's recursion or int-digit limits
            raise BadRequest(f"{field} is not valid JSON", param=field) from None
        if not isinstance(parsed, dict | bool):
            raise BadRequest(f"{field} must be a JSON schema", param=field)
        return value
    if isinstance(value, dict):
        return json.dumps(value)
    raise BadRequest(f"{field} must be a JSON schema (an object or a string)", param=field)


def _grammar(body: dict[str, Any]) -> Constraint | None:
    given = [k for k in _GRAMMARS if body.get(k) is not None]
    if len(given) > 1:
        raise BadRequest("Only one of regex, json_schema, or ebnf can be set.", param=given[1])
    if not given:
        return None
    key = given[0]
    value = body[key]
    if key == "json_schema":
        return Constraint(key, _schema_text(value, key))
    if not isinstance(value, str) or not value:
        raise BadRequest(f"{key} must be a non-empty string", param=key)
    if key == "regex":
        check_regex(value, key)
    return Constraint(key, value)


def _response_format(fmt: Any) -> Constraint | None:
    if fmt is None:
        return None
    if not isinstance(fmt, dict) or not isinstance(fmt.get("type"), str):
        raise BadRequest("response_format must be an object with a string type",
                         param="response_format")
    kind = fmt["type"]
    if kind == "text":
        return None
    if kind == "json_object":
        return Constraint("response_format", '{"type": "object"}', {"type": "json_object"})
    if kind == "json_schema":
        spec = fmt.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("schema"), dict):
            raise BadRequest("response_format.json_schema.schema must be a JSON schema object",
                             param="response_format")
        if not isinstance(spec.get("name"), str):
            raise BadRequest("response_format.json_schema.name must be a string",
                             param="response_format")
        return Constraint("response_format", json.dumps(spec["schema"]),
                          {"type": "json_schema", "json_schema": spec})
    raise BadRequest(f"response_format type {kind!r} is not supported in token-in-token-out "
                     "mode (text, json_object and json_schema are)", param="response_format")


def constraint_of(body: dict[str, Any]) -> Constraint | None:
    """The one constraint ``body`` asks for; ``BadRequest`` names a bad or second one."""
    grammar = _grammar(body)
    fmt = _response_format(body.get("response_format"))
    if grammar is not None and fmt is not None:
        raise BadRequest("response_format cannot be combined with regex, ebnf or json_schema",
                         param="response_format")
    return grammar or fmt
