"""``llama3`` / ``llama3-json``: ``{"name", "parameters"}`` as the whole reply, or after
``<|python_tag|>`` anywhere in it (text before the tag is content), ``;``-separated
calls allowed, as SGLang's Llama32Detector parses them. Text after the last call is
content.
"""

from __future__ import annotations

from ...stop_strings import partial_tag
from .base import ToolCall, ToolParser, call_of, decode_at, skip_space
from .structural import CallFrame

__all__ = ["Llama3JsonParser"]


class Llama3JsonParser(ToolParser):
    start = "<|python_tag|>"
    markers = (start,)
    frame = CallFrame('<|python_tag|>{"name":"', '", "arguments":', "}", start)

    _content = False  # set once the reply began as text: only the tag opens calls then

    def _find_start(self, text: str) -> tuple[int, int] | None:
        at = text.find(self.start)
        if at >= 0:
            return at, len(self.start)
        head = text.lstrip()
        if not self._content and head.startswith("{"):
            return len(text) - len(head), 0
        return None

    def _hold(self, text: str) -> int:
        head = text.lstrip()
        if not self._content and (not head or self.start.startswith(head)):
            return len(text)  # nothing shown yet: may still open a call
        self._content = True
        return partial_tag(text, self.start)

    def parse(self, captured: str) -> tuple[list[ToolCall], str]:
        calls: list[ToolCall] = []
        pos = 0
        while True:
            at = skip_space(captured, pos)
            if captured.startswith(self.start, at):
                at += len(self.start)
            got = decode_at(captured, at)
            call = call_of(got[0], "parameters") if got is not None else None
            if got is None or call is None:
                return calls, captured[pos:]
            calls.append(call)
            pos = got[1]
            if captured.startswith(";", skip_space(captured, pos)):
                pos = skip_space(captured, pos) + 1
