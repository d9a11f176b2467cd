"""The structural tag a ``--tool-parser`` constrains tool calls with, as SGLang 0.5.23's
chat route builds it (``FunctionCallParser.get_structure_constraint``).

Invariants (read from SGLang's ``function_call_parser.py`` and ``serving_chat.py``):
- A tag is built only for a parser with a call frame (``ToolParser.frame``: its
  detector's ``structure_info``), only when there are tools and ``tool_choice`` is not
  ``none``, and only when the call is forced (``required`` or a named function:
  ``at_least_one`` true) or some tool has ``function.strict: true`` (``auto``:
  ``at_least_one`` false).
- One structure per tool, in ``tools`` order, over all the tools even for a named
  choice (SGLang passes every tool); its schema is the tool's ``parameters`` when the
  tool is strict, else ``{}`` (any JSON).
- Tools whose ``$defs`` give one name two schemas get no tag (SGLang's builder raises,
  and its route goes on without one).
- The text is ``json.dumps`` of SGLang's ``LegacyStructuralTagResponseFormat``
  (``seedproxy.legacy_tag.legacy_tag_text``), key order included.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...errors import BadRequest
from ...legacy_tag import legacy_tag_text
from ...tool_choice import ToolChoiceError, tool_defs

__all__ = ["CallFrame", "ToolAsk", "frame_tag", "strict_tools"]


@dataclass(frozen=True, slots=True)
class ToolAsk:
    """What a request asks of its tool calls, as the tag builders read it."""

    tools: list[Any]  # checked by ``tool_choice.forcing_of``
    forced: bool  # ``required`` or a named function
    named: str | None = None  # the named function, if one
    parallel: bool = True  # ``parallel_tool_calls`` (null is true)
    think: tuple[str, ...] = ()
    """The ``--reasoning-parser``'s open and close tags: SGLang lets them through free
    text when a reasoning parser owns the reasoning (``strip_structural_tag_excludes``)."""


@dataclass(frozen=True, slots=True)
class CallFrame:
    """One call as a detector's ``structure_info`` frames it: ``before`` + the tool's
    name + ``after`` opens it, then its arguments' JSON, then ``end``."""

    before: str
    after: str
    end: str
    trigger: str  # the text that starts a call in free text


def strict_tools(tools: list[Any]) -> list[bool]:
    """Each tool's ``function.strict`` (absent or null is false); a 400 naming ``tools``
    when it is not a boolean, as SGLang's request model refuses it."""
    flags = []
    for i, tool in enumerate(tools):
        strict = tool["function"].get("strict")
        if strict is not None and not isinstance(strict, bool):
            raise BadRequest(f"tools[{i}].function.strict must be a boolean", param="tools")
        flags.append(bool(strict))
    return flags


def frame_tag(frame: CallFrame, ask: ToolAsk) -> str | None:
    """The legacy tag over ``ask.tools``: always when forced, else only when a tool is
    strict (None otherwise)."""
    tools = ask.tools
    flags = strict_tools(tools)
    if not tools or not (ask.forced or any(flags)):
        return None
    try:
        tool_defs(tools)
    except ToolChoiceError:
        return None  # SGLang's builder refuses the tools, and it sends no tag
    structures = [(frame.before + tool["function"]["name"] + frame.after,
                   (tool["function"].get("parameters") or {}) if strict else {}, frame.end)
                  for tool, strict in zip(tools, flags, strict=True)]
    return legacy_tag_text(structures, [frame.trigger], ask.forced)
