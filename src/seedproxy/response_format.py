"""A chat or completions request's ``response_format``, read as SGLang's chat route reads
it: the rule the proxy's token-in-token-out mode and the engine share.

Invariants:
- ``text`` (or no ``response_format``) asks for nothing. ``json_object`` is the schema
  ``{"type": "object"}``; ``json_schema`` needs ``json_schema.name`` (a string) and
  ``json_schema.schema`` (an object), sent as ``json.dumps`` of the schema; both go under
  the ``json_schema`` sampling field.
- ``structural_tag`` goes under the ``structural_tag`` field as SGLang's chat route writes
  it: xgrammar's ``format`` form (an object) as sent, the legacy form as
  ``legacy_tag`` writes it.
- Anything else is a ``BadRequest`` (400) naming ``response_format``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .errors import BadRequest
from .legacy_tag import legacy_structures, legacy_tag

__all__ = ["Format", "format_of"]

_PARAM = "response_format"


@dataclass(frozen=True, slots=True)
class Format:
    field: str
    """The sampling field SGLang's chat route puts it under: ``json_schema`` or
    ``structural_tag``."""
    source: str
    """The text sent under ``field``."""
    asked: dict[str, Any]
    """``{"type": "json_object"}``, ``{"type": "json_schema", "json_schema": {...as
    sent}}`` or the ``structural_tag`` object as sent."""


def _refuse(message: str) -> BadRequest:
    return BadRequest(message, param=_PARAM)


def format_of(fmt: Any, where: str) -> Format | None:
    """What ``fmt`` asks for; ``where`` ends the message refusing an unknown type
    (``"in token-in-token-out mode"``, say)."""
    if fmt is None:
        return None
    if not isinstance(fmt, dict) or not isinstance(fmt.get("type"), str):
        raise _refuse("response_format must be an object with a string type")
    kind = fmt["type"]
    if kind == "text":
        return None
    if kind == "json_object":
        return Format("json_schema", '{"type": "object"}', {"type": "json_object"})
    if kind == "json_schema":
        spec = fmt.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("schema"), dict):
            raise _refuse("response_format.json_schema.schema must be a JSON schema object")
        if not isinstance(spec.get("name"), str):
            raise _refuse("response_format.json_schema.name must be a string")
        return Format("json_schema", _dumped(spec["schema"]),
                      {"type": "json_schema", "json_schema": spec})
    if kind == "structural_tag":
        return Format("structural_tag", _structural_tag(fmt), fmt)
    raise _refuse(f"response_format type {kind!r} is not supported {where} "
                  "(text, json_object, json_schema and structural_tag are)")


def _dumped(value: Any) -> str:
    try:
        return json.dumps(value)
    except RecursionError:  # nested past json's limit: never a valid schema or tag
        raise _refuse("response_format is nested too deeply") from None


def _structural_tag(fmt: dict[str, Any]) -> str:
    if "format" in fmt:  # xgrammar's StructuralTag: read where it is compiled
        if not isinstance(fmt["format"], dict):
            raise _refuse("response_format.format must be an object")
        return _dumped(fmt)
    try:
        structures, triggers, at_least_one = legacy_structures(fmt)
    except ValueError as exc:
        raise _refuse(f"response_format.{exc}") from None
    if not all(isinstance(schema, dict | None) for _, schema, _ in structures):
        raise _refuse("response_format.structures' schemas must be JSON schema objects")
    return _dumped(legacy_tag(structures, triggers, at_least_one))
