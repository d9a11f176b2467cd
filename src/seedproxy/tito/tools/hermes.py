"""``hermes`` / ``qwen`` / ``qwen25``: ``<tool_call>{"name", "arguments"}</tool_call>``,
repeated (Qwen2.5, Qwen3, Hermes), as SGLang's HermesDetector and Qwen25Detector
stream it. The JSON is decoded string-aware (``</tool_call>`` inside an argument string
is the argument's); a block whose JSON is not a call stays content, tags included.
"""

from __future__ import annotations

from .base import ToolCall, ToolParser, call_of, decode_at, skip_space, tagged_calls
from .structural import CallFrame

__all__ = ["HermesParser", "Qwen25Parser"]


class HermesParser(ToolParser):
    start = "<tool_call>"
    end = "</tool_call>"
    markers = (start, end)
    frame = CallFrame('<tool_call>{"name":"', '", "arguments":', "}</tool_call>", start)

    def parse(self, captured: str) -> tuple[list[ToolCall], str]:
        return tagged_calls(captured, self.start, self._block)

    def _block(self, rest: str) -> tuple[list[ToolCall] | None, int]:
        got = decode_at(rest, 0)
        call = call_of(got[0]) if got is not None else None
        if got is None or call is None:
            close = rest.find(self.end)
            return None, len(rest) if close < 0 else close + len(self.end)
        stop = skip_space(rest, got[1])
        return [call], stop + len(self.end) if rest.startswith(self.end, stop) else got[1]


class Qwen25Parser(HermesParser):
    """The same calls; SGLang's Qwen25Detector frames them on their own lines."""

    frame = CallFrame('<tool_call>\n{"name":"', '", "arguments":', "}\n</tool_call>",
                      HermesParser.start)
