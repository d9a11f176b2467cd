"""Kimi K2's native structural tag, as SGLang 0.5.23's KimiK2Detector asks xgrammar
0.2.7 for it (``get_model_structural_tag("kimi", ...)``, ``get_kimi_structural_tag``).

Invariants (read from SGLang's ``kimik2_detector.py`` and ``serving_chat.py``, and
xgrammar's ``builtin_structural_tag.py`` / ``structural_tag.py``):
- Sent for a forced call and for ``auto`` with a strict tool (as every tag:
  ``structural``), with reasoning ``disabled``: SGLang asks for the reasoning block only
  with no ``--reasoning-parser``, and then its thinking mode is off.
- Each call: ``<|tool_call_begin|>functions.NAME:``, a ``\\d+`` index,
  ``<|tool_call_argument_begin|>``, the arguments' JSON, ``<|tool_call_end|>``.
- The arguments' schema: for a forced call, a tool's ``parameters`` when it is strict
  (``true`` when it has none), else ``{"type": "object"}`` (SGLang's override); for
  ``auto``, ``true`` (any JSON) for ``strict: false`` or no ``parameters``, else the
  ``parameters``.
- ``required``: the section (``<|tool_calls_section_begin|>`` ... ``_end|>``) around
  one or more calls (one without ``parallel_tool_calls``); a named function: the
  section around that one call; ``auto``: free text whose trigger is the section
  begin, the text excluding ``<think>``, ``</think>`` and ``<|tool_call_begin|>`` (the
  reasoning parser's tags let through).
- The text is ``json.dumps`` of the pydantic ``model_dump(by_alias=True)``: every
  format with its defaults, in field order.
"""

from __future__ import annotations

import json
from typing import Any

from .structural import ToolAsk, strict_tools

__all__ = ["kimi_tag"]

SECTION_BEGIN = "<|tool_calls_section_begin|>"
SECTION_END = "<|tool_calls_section_end|>"
CALL_BEGIN = "<|tool_call_begin|>"
ARGS_BEGIN = "<|tool_call_argument_begin|>"
CALL_END = "<|tool_call_end|>"
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
    chosen = [(t, s) for t, s in zip(ask.tools, flags, strict=True)
              if ask.named is None or t["function"]["name"] == ask.named]
    calls = [_call(t["function"]["name"], _schema(t["function"], s, ask.forced))
             for t, s in chosen]
    fmt: dict[str, Any]
    if ask.named is not None:
        fmt = {"type": "sequence", "elements": [_const(SECTION_BEGIN), calls[0],
                                                _const(SECTION_END)]}
    elif ask.forced:
        fmt = {"type": "sequence", "elements": [_const(SECTION_BEGIN),
                                                _calls(calls, ask.parallel),
                                                _const(SECTION_END)]}
    else:
        section = {"type": "tag", "begin": SECTION_BEGIN,
                   "content": _calls(calls, ask.parallel), "end": SECTION_END}
        excludes = [t for t in (*_THINK, CALL_BEGIN) if t not in ask.think]
        fmt = {"type": "triggered_tags", "triggers": [SECTION_BEGIN], "tags": [section],
               "at_least_one": False, "stop_after_first": not ask.parallel,
               "excludes": excludes}
    return json.dumps({"type": "structural_tag", "format": fmt})
