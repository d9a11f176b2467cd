"""A forced call (``tool_choice`` ``required`` or a named function, with or without a
``--tool-parser``): the whole reply is the JSON array the forcing grammar allows, read
as SGLang's chat route reads a forced call (``seedproxy.tool_choice.parse_forced``).
Anything else is content, exactly as generated.
"""

from __future__ import annotations

from ...tool_choice import parse_forced
from .base import ToolCall, ToolParser

__all__ = ["ForcedCallParser"]


class ForcedCallParser(ToolParser):
    """Captures the whole reply: a forced call has no text before it."""

    def _find_start(self, text: str) -> tuple[int, int] | None:
        return 0, 0

    def parse(self, captured: str) -> tuple[list[ToolCall], str]:
        calls = parse_forced(captured) or []
        return [ToolCall(name, arguments) for name, arguments in calls], ""
