"""Sampling fields of a request, checked: the rules the proxy's token-in-token-out mode
and the engine share. A bad value is a ``BadRequest`` (400) naming its field, raised
before any work on it; a field left out (or ``null``) is ``None``, each side applying
its own default. Ranges and messages are SGLang's: ``frequency_penalty`` and
``presence_penalty`` in [-2, 2], ``repetition_penalty`` in (0, 2]; ``logit_bias`` keys
are ASCII token ids in the vocabulary, its values finite numbers. A regex must compile
with Python's ``re``.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from .errors import BadRequest
from .legacy_tag import legacy_structures, legacy_tag

__all__ = ["Format", "check_regex", "format_of", "logit_bias", "number", "penalties", "regexes",
           "token_ids"]

_KEY_DIGITS = 12


def number(body: dict[str, Any], key: str) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadRequest(f"{key} must be a number", param=key)
    return float(value)


def penalties(body: dict[str, Any]) -> tuple[float | None, float | None, float | None]:
    """``frequency_penalty``, ``presence_penalty`` and ``repetition_penalty``."""
    found = [number(body, key) for key in ("frequency_penalty", "presence_penalty")]
    for key, value in zip(("frequency_penalty", "presence_penalty"), found, strict=True):
        if value is not None and not -2.0 <= value <= 2.0:
            raise BadRequest(f"{key} must be in [-2, 2], got {value}.", param=key)
    rep = number(body, "repetition_penalty")
    if rep is not None and not 0.0 < rep <= 2.0:
        raise BadRequest(f"repetition_penalty must be in (0, 2], got {rep}.",
                         param="repetition_penalty")
    return found[0], found[1], rep


def logit_bias(value: Any, vocab_size: int) -> tuple[tuple[int, float], ...]:
    """``(token id, bias)`` pairs by token id."""
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise BadRequest("logit_bias must be an object of token id -> bias", param="logit_bias")
    bias: dict[int, float] = {}
    for key, amount in value.items():
        if not (isinstance(key, str) and 0 < len(key) <= _KEY_DIGITS and key.isascii()
                and key.isdigit() and int(key) < vocab_size):
            raise BadRequest(f"logit_bias must has keys in [0, {vocab_size - 1}], "
                             f"got {str(key)[:_KEY_DIGITS]}.", param="logit_bias")
        if isinstance(amount, bool) or not isinstance(amount, int | float) or not (
                math.isfinite(amount)):
            raise BadRequest("logit_bias values must be finite numbers", param="logit_bias")
        bias[int(key)] = float(amount)
    return tuple(sorted(bias.items()))


def check_regex(pattern: str, param: str) -> None:
    try:
        re.compile(pattern)
    except (re.error, OverflowError, RecursionError) as exc:
        shown = pattern if len(pattern) <= 64 else pattern[:64] + "..."
        raise BadRequest(f"{param} {shown!r} is not a valid regex: {exc}",
                         param=param) from None


def regexes(value: Any, param: str) -> list[str]:
    """A regex or a list of them, each compiled once here."""
    patterns = [value] if isinstance(value, str) else value if value is not None else []
    if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
        raise BadRequest(f"{param} must be a regex or a list of regexes", param=param)
    for pattern in patterns:
        check_regex(pattern, param)
    return patterns


def token_ids(value: Any, param: str) -> list[int]:
    """A list of token ids (non-negative integers); a falsy value is none."""
    if not value:
        return []
    if not isinstance(value, list) or not all(type(i) is int and i >= 0 for i in value):
        raise BadRequest(f"{param} must be a list of token ids", param=param)
    return value


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
    """What ``response_format`` ``fmt`` asks for, read as SGLang's chat route reads it:
    ``text`` (or none) nothing; ``json_object`` the schema ``{"type": "object"}``;
    ``json_schema`` (with a string ``name`` and an object ``schema``) ``json.dumps`` of
    the schema; ``structural_tag`` xgrammar's ``format`` form as sent, the legacy form as
    ``legacy_tag`` writes it. Another type is a 400; ``where`` ends its message (``"in
    token-in-token-out mode"``, say)."""
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
