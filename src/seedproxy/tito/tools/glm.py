"""``glm45`` (``glm``): GLM-4.5/4.6's XML-ish calls, as SGLang 0.5.23's Glm4MoeDetector
parses them::

    <tool_call>NAME
    <arg_key>KEY</arg_key>
    <arg_value>VALUE</arg_value>
    ...
    </tool_call>

- A call ends at the first ``</tool_call>``; its name runs to the first newline (a real
  one or the two characters ``\\n``) and must be one of the request's tools.
- Each value is typed by that tool's JSON Schema for its key (``value_type``): a
  ``string`` parameter stays the text (or the JSON string it spells, its quotes
  stripped); any other, or an unknown key, is read as JSON, then as JSON inside an
  escaped string, then as a Python literal, else kept as text. A ``number`` that reads
  as a string is converted where it spells one. This is SGLang's order, quirks
  included (a ``string`` parameter written ``true`` comes back ``"True"``).
"""

from __future__ import annotations

import ast
import json
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from ...nesting import too_deep
from .base import ToolCall, ToolParser, loads, schema_properties, tagged_calls

__all__ = ["Glm45Parser", "argument_value", "value_type"]

_KEY, _KEY_END = "<arg_key>", "</arg_key>"
_VALUE, _VALUE_END = "<arg_value>", "</arg_value>"
_UNSET = object()
_KINDS = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"),
          (list, "array"), (dict, "object"))


def _literal(text: str) -> Any:
    """``text`` read as a Python literal, invalid-escape warnings silenced, or ``_UNSET``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            value = ast.literal_eval(text)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return _UNSET
    return _UNSET if isinstance(value, (dict, list)) and too_deep(value) else value


def _number(value: str) -> Any:
    try:
        return float(value) if "." in value or "e" in value.lower() else int(value)
    except ValueError:
        return value


def value_type(schema: Any) -> str | None:
    """The type a JSON Schema gives its value, as SGLang infers it (None: it says none)."""
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    if isinstance(kind, str):
        return kind
    if isinstance(kind, list) and kind:
        real = [t for t in kind if t != "null"]
        return str(real[0]) if real else "string"
    branches = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(branches, list):
        found = [t for t in (value_type(b) for b in branches) if t]
        if found:
            if len(set(found)) == 1:
                return found[0]
            if len(set(found)) == 2 and "null" in found:
                return next(t for t in found if t != "null")
            return "string" if "string" in found else found[0]
    if isinstance(schema.get("enum"), list):
        kinds = {"null" if v is None else next((name for kind, name in _KINDS if isinstance(
            v, kind)), "string") for v in schema["enum"]}
        return kinds.pop() if len(kinds) == 1 else "string"
    if isinstance(schema.get("allOf"), list):
        return next((t for t in map(value_type, schema["allOf"]) if t and t != "string"),
                    "string")
    if "properties" in schema:
        return "object"
    return "array" if "items" in schema else None


def argument_value(raw: str, kind: str | None) -> Any:
    """One ``<arg_value>``'s text as the call's argument, for a parameter of ``kind``."""
    value = loads(raw, _UNSET)
    if value is _UNSET:
        inner = loads('"' + raw + '"', _UNSET)
        value = loads(inner, _UNSET) if isinstance(inner, str) else _UNSET
    if value is not _UNSET and kind == "number" and isinstance(value, str):
        value = _number(value)
    if value is _UNSET and kind == "string":
        quoted = len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'"
        value = raw[1:-1] if quoted else raw
    if value is _UNSET:
        value = _literal(raw)
    if value is _UNSET:
        value = raw
    if kind != "string" or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False) if isinstance(value, (dict, list)) else str(
        value)


class Glm45Parser(ToolParser):
    start = "<tool_call>"
    end = "</tool_call>"
    markers = (start, end, _KEY, _KEY_END, _VALUE, _VALUE_END)

    def __init__(self, tools: Sequence[Mapping[str, Any]] = ()) -> None:
        super().__init__(tools)
        self._schemas = {t["function"]["name"]: schema_properties(
            t["function"].get("parameters")) for t in tools}

    def parse(self, captured: str) -> tuple[list[ToolCall], str]:
        return tagged_calls(captured, self.start, self._block)

    def _block(self, rest: str) -> tuple[list[ToolCall] | None, int]:
        """The call after an opening tag; it ends at the first closing one."""
        close = rest.find(self.end)
        return (None, len(rest)) if close < 0 else (self._call(rest[:close]),
                                                     close + len(self.end))

    def _call(self, body: str) -> list[ToolCall] | None:
        """The call whose text between the tags is ``body``, or None."""
        cut = min((i for i in (body.find("\n"), body.find("\\n")) if i >= 0), default=-1)
        schema = self._schemas.get(body[:cut]) if cut >= 0 else None
        if schema is None:
            return None
        arguments = {key.strip(): argument_value(raw, value_type(schema.get(key.strip())))
                     for key, raw in _pairs(body, cut)}
        try:
            return [ToolCall(body[:cut], json.dumps(arguments, ensure_ascii=False))]
        except (TypeError, ValueError):  # a Python literal JSON cannot hold (a set)
            return None


def _pairs(body: str, pos: int) -> list[tuple[str, str]]:
    """The ``<arg_key>K</arg_key>`` then (after whitespace or ``\\n``s)
    ``<arg_value>V</arg_value>`` pairs of ``body`` from ``pos``, in order."""
    pairs: list[tuple[str, str]] = []
    while (at := body.find(_KEY, pos)) >= 0:
        key_end = body.find(_KEY_END, at + len(_KEY))
        if key_end < 0:
            break
        pos = key_end + len(_KEY_END)
        gap = pos
        while gap < len(body) and (body[gap].isspace() or body.startswith("\\n", gap)):
            gap += 2 if body[gap] == "\\" else 1
        value_end = body.find(_VALUE_END, gap) if body.startswith(_VALUE, gap) else -1
        if value_end < 0:
            continue
        pairs.append((body[at + len(_KEY):key_end], body[gap + len(_VALUE):value_end]))
        pos = value_end + len(_VALUE_END)
    return pairs
