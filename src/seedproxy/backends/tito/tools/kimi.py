"""``kimi_k2``: Kimi K2's call section, as SGLang's KimiK2Detector parses it:
``<|tool_calls_section_begin|>``, per call ``<|tool_call_begin|>functions.NAME:N
<|tool_call_argument_begin|>{...}<|tool_call_end|>``, then ``<|tool_calls_section_end|>``.
Text after the section is content. Call ids are ``functions.NAME:K`` with K counting
the conversation's calls (earlier turns' first), as SGLang gives them and Kimi's
template expects.
"""

from __future__ import annotations

import re

from .base import ToolCall, ToolParser, call_of, decode_at, marked_calls, skip_space
from .kimi_tag import kimi_tag
from .structural import ToolAsk

__all__ = ["KimiK2Parser"]

SECTION_BEGIN = "<|tool_calls_section_begin|>"
SECTION_END = "<|tool_calls_section_end|>"
CALL_BEGIN = "<|tool_call_begin|>"
ARGS_BEGIN = "<|tool_call_argument_begin|>"
CALL_END = "<|tool_call_end|>"
_ID = re.compile(r"(?:functions\.)?([\w.\-]+):\d+")


class KimiK2Parser(ToolParser):
    start = SECTION_BEGIN
    markers = (SECTION_BEGIN, SECTION_END, CALL_BEGIN, ARGS_BEGIN, CALL_END)
    numbered = True

    @staticmethod
    def call_id(base: str, position: int, name: str = "", earlier: int = 0) -> str:
        return f"functions.{name}:{earlier + position}"

    @classmethod
    def structural_tag(cls, ask: ToolAsk) -> str | None:
        return kimi_tag(ask)

    def parse(self, captured: str) -> tuple[list[ToolCall], str]:
        return marked_calls(captured, CALL_BEGIN, SECTION_END, self._call)

    def _call(self, text: str, at: int) -> tuple[ToolCall, int] | None:
        args = text.find(ARGS_BEGIN, at)
        named = _ID.fullmatch(text[at:args].strip()) if args >= 0 else None
        if named is None:
            return None
        got = decode_at(text, skip_space(text, args + len(ARGS_BEGIN)))
        call = call_of({"name": named.group(1), "arguments": got[0]}) if got else None
        if got is None or call is None:
            return None
        end = skip_space(text, got[1])
        return (call, end + len(CALL_END)) if text.startswith(CALL_END, end) else None
