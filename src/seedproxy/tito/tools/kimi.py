"""``kimi_k2``: Kimi K2's call sections, as SGLang 0.5.23's KimiK2Detector parses them:
``<|tool_calls_section_begin|>``, per call ``<|tool_call_begin|>ID
<|tool_call_argument_begin|>{...}<|tool_call_end|>``, then ``<|tool_calls_section_end|>``.

- ``ID`` is ``functions.NAME:N`` or ``NAME:N`` (the call is NAME's), or a bare counter
  ``N``: the call is then the only tool's, or, among several, the tool whose schema's
  properties best match the arguments' keys (shared keys less extra keys, at least
  0; the first best one), else no one's. Any other id is no call.
- A call that does not read is skipped; the calls around it still count. Text between
  and after sections is content.
- Call ids are ``functions.NAME:K`` with K counting the conversation's calls (earlier
  turns' first), as SGLang gives them and Kimi's template expects.

Its structural tag (``kimi_tag``) is Kimi K2's native one, as SGLang asks xgrammar 0.2.7
for it (``get_kimi_structural_tag``), sent when any tag is (``structural``), with
reasoning ``disabled``: SGLang asks for the reasoning block only with no
``--reasoning-parser``, and then its thinking mode is off. A forced call's schema is
``{"type": "object"}`` for a tool that is not strict (SGLang's override). The text is
``json.dumps`` of the pydantic ``model_dump(by_alias=True)``: every format with its
defaults, in field order.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from .base import ToolCall, ToolParser, call_of, decode_at, schema_properties, tagged_calls
from .structural import ToolAsk, strict_tools

__all__ = ["KimiK2Parser", "kimi_tag"]

SECTION_BEGIN = "<|tool_calls_section_begin|>"
SECTION_END = "<|tool_calls_section_end|>"
CALL_BEGIN = "<|tool_call_begin|>"
ARGS_BEGIN = "<|tool_call_argument_begin|>"
CALL_END = "<|tool_call_end|>"
_ID = re.compile(r"(?:functions\.)?([\w.\-]+):\d+")
_COUNTER = re.compile(r"\d+")


class KimiK2Parser(ToolParser):
    start = SECTION_BEGIN
    markers = (SECTION_BEGIN, SECTION_END, CALL_BEGIN, ARGS_BEGIN, CALL_END)
    numbered = True

    def __init__(self, tools: Sequence[Mapping[str, Any]] = ()) -> None:
        super().__init__(tools)
        self._tools = [(t["function"]["name"], set(schema_properties(
            t["function"].get("parameters")))) for t in tools]

    @staticmethod
    def call_id(base: str, position: int, name: str = "", earlier: int = 0) -> str:
        return f"functions.{name}:{earlier + position}"

    @classmethod
    def structural_tag(cls, ask: ToolAsk) -> str | None:
        return kimi_tag(ask)

    def parse(self, captured: str) -> tuple[list[ToolCall], str]:
        return tagged_calls(captured, SECTION_BEGIN, self._section)

    def _section(self, rest: str) -> tuple[list[ToolCall], int]:
        """The calls of the section ``rest`` opens and where it ends."""
        end = rest.find(SECTION_END)
        section, stop = (rest, len(rest)) if end < 0 else (rest[:end], end + len(SECTION_END))
        found = (self._call(piece) for piece in section.split(CALL_BEGIN)[1:])
        return [c for c in found if c is not None], stop

    def _call(self, piece: str) -> ToolCall | None:
        """The call in ``piece`` (what follows one ``<|tool_call_begin|>``), or None."""
        args = piece.find(ARGS_BEGIN)
        ident = piece[:args].strip() if args >= 0 else ""
        if not ident or any(c.isspace() or c in "<|" for c in ident):
            return None
        got = decode_at(piece, args + len(ARGS_BEGIN))
        if got is None or not isinstance(got[0], dict) or not piece[got[1]:].lstrip(
                ).startswith(CALL_END):
            return None
        named = _ID.fullmatch(ident)
        name = named.group(1) if named else (
            self._inferred(got[0]) if _COUNTER.fullmatch(ident) else None)
        return call_of({"name": name, "arguments": got[0]}) if name else None

    def _inferred(self, arguments: dict[str, Any]) -> str | None:
        """The tool a bare-counter call is for (SGLang's ``_infer_tool_name``)."""
        if len(self._tools) <= 1:
            return self._tools[0][0] if self._tools else None
        keys = set(arguments)
        best, best_score = None, -1  # a tool must score at least 0
        for name, properties in self._tools:
            score = len(keys & properties) - len(keys - properties)
            if properties and score > best_score:
                best, best_score = name, score
        return best


_THINK = ("<think>", "</think>")


def _const(value: str) -> dict[str, Any]:
    return {"type": "const_string", "value": value}


def _call(name: str, schema: Any) -> dict[str, Any]:
    return {"type": "tag", "begin": f"{CALL_BEGIN}functions.{name}:", "content": {
        "type": "sequence", "elements": [
            {"type": "regex", "pattern": r"\d+"}, _const(ARGS_BEGIN),
            {"type": "json_schema", "json_schema": schema, "style": "json",
             "any_order": False, "max_whitespace_cnt": None}]},
        "end": CALL_END}


def _calls(calls: list[dict[str, Any]], parallel: bool) -> dict[str, Any]:
    return {"type": "tags_with_separator", "tags": calls, "separator": "",
            "at_least_one": True, "stop_after_first": not parallel}


def _schema(function: dict[str, Any], strict: bool, forced: bool) -> Any:
    parameters = function.get("parameters")
    if forced and not strict:
        return {"type": "object"}
    if function.get("strict") is False or parameters is None:
        return True
    return parameters


def kimi_tag(ask: ToolAsk) -> str | None:
    """The tag's text, or None where SGLang sends none (``auto`` with no strict tool)."""
    flags = strict_tools(ask.tools)
    if not ask.tools or not (ask.forced or any(flags)):
        return None
    calls = [_call(t["function"]["name"], _schema(t["function"], s, ask.forced))
             for t, s in zip(ask.tools, flags, strict=True)
             if ask.named is None or t["function"]["name"] == ask.named]
    fmt: dict[str, Any]
    if ask.forced:  # a named function (forced) is the section around its one call
        fmt = {"type": "sequence", "elements": [
            _const(SECTION_BEGIN), calls[0] if ask.named is not None else _calls(
                calls, ask.parallel), _const(SECTION_END)]}
    else:
        section = {"type": "tag", "begin": SECTION_BEGIN,
                   "content": _calls(calls, ask.parallel), "end": SECTION_END}
        excludes = [t for t in (*_THINK, CALL_BEGIN) if t not in ask.think]
        fmt = {"type": "triggered_tags", "triggers": [SECTION_BEGIN], "tags": [section],
               "at_least_one": False, "stop_after_first": not ask.parallel,
               "excludes": excludes}
    return json.dumps({"type": "structural_tag", "format": fmt})
