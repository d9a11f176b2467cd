"""Structured output asked by a chat request, checked, for token-prompt requests.

Invariants:
- At most one constraint: ``regex``, ``ebnf``, ``json_schema`` or a ``response_format``
  other than ``text``; two are a 400 naming the second (SGLang: "Only one of regex,
  json_schema, or ebnf can be set").
- ``response_format`` is kept as the kind asked (``json_object``, or ``json_schema`` with
  its ``json_schema`` object), so each dialect maps it as its own chat route does:
  SGLang turns ``json_object`` into the schema ``{"type": "object"}`` and a schema into
  ``json.dumps(schema)``; vLLM's completions take ``response_format`` as its chat does.
- A ``regex`` must compile with Python's ``re`` (``sampling_fields.check_regex``: a 400
  naming it otherwise), so an upstream's refusal of it never uses an index.
- ``structural_tag`` is sent as SGLang's chat route writes it: ``json.dumps`` of
  its ``model_dump(by_alias=True)``; for the ``structures`` / ``triggers`` form that is
  ``seedproxy.legacy_tag``'s text (schema null and at_least_one false when left out);
  the ``format`` form (xgrammar's own) goes as sent. Other kinds are a 400.
- A forcing ``tool_choice`` (``required`` or a named tool) is the tool parser's
  structural tag where it builds one (``tools.structural``), else the JSON schema of
  ``seedproxy.tool_choice``; with any other constraint it is a 400, as SGLang 0.5.23's
  ``to_sampling_params`` refuses the pair. The tag of an unforced call (``auto`` with
  a strict tool) gives way to any other constraint, as SGLang drops it then.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..errors import BadRequest
from ..response_format import format_of
from ..sampling_fields import check_regex
from ..tool_choice import Forcing

__all__ = ["Constraint", "constraint_of"]

_GRAMMARS = ("regex", "ebnf", "json_schema")


@dataclass(frozen=True, slots=True)
class Constraint:
    field: str
    """The request field that asked: ``regex``, ``ebnf``, ``json_schema``,
    ``response_format`` or ``tool_choice``."""
    source: str
    """The grammar, or the JSON schema as SGLang's chat route writes it."""
    response_format: dict[str, Any] | None = None
    """For ``response_format``: ``{"type": "json_object"}``, ``{"type": "json_schema",
    "json_schema": {...as sent}}`` or the ``structural_tag`` object as sent."""
    structural: bool = False
    """A tool parser's structural tag for its calls (``tools.structural``)."""

    @property
    def param(self) -> str:
        """The ``sampling_params`` key SGLang's chat route puts it under."""
        if self.field in _GRAMMARS:
            return self.field
        if self.structural:
            return "structural_tag"
        if self.response_format is not None and (
                self.response_format.get("type") == "structural_tag"):
            return "structural_tag"
        return "json_schema"  # json_object, json_schema, a forced tool call


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
    asked = format_of(fmt, "in token-in-token-out mode")
    return None if asked is None else Constraint("response_format", asked.source, asked.asked)


def constraint_of(body: dict[str, Any], forcing: Forcing | None = None,
                  tool_tag: str | None = None) -> Constraint | None:
    """The one constraint ``body`` asks for (``forcing``: its forced tool call, checked;
    ``tool_tag``: the tool parser's structural tag for its calls, if it builds one);
    ``BadRequest`` names a bad or second one. An ``auto`` tool tag gives way to the
    client's own constraint, as SGLang drops it then."""
    grammar = _grammar(body)
    fmt = _response_format(body.get("response_format"))
    if grammar is not None and fmt is not None:
        raise BadRequest("response_format cannot be combined with regex, ebnf or json_schema",
                         param="response_format")
    asked = grammar or fmt
    if forcing is not None and asked is not None:
        raise BadRequest("tool_choice 'required' or a named tool cannot be combined with "
                         "response_format, regex, or ebnf: the tool-call constraint and the "
                         "output constraint cannot both be honored.", param="tool_choice")
    if asked is not None:
        return asked
    if tool_tag is not None:
        return Constraint("tool_choice", tool_tag, structural=True)
    return None if forcing is None else Constraint("tool_choice", forcing.schema)
