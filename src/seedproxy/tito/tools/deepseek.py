"""``deepseekv3`` and ``deepseekv31``: DeepSeek's special-token call sections, as
SGLang's DeepSeekV3Detector and DeepSeekV31Detector parse them.

- V3 / R1-0528: ``<｜tool▁calls▁begin｜>`` then, per call,
  ``<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{...}\\n```<｜tool▁call▁end｜>``,
  then ``<｜tool▁calls▁end｜>``.
- V3.1: the same section with ``<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>``.

Calls follow one another until one does not read; what follows them (and the
section's end) is content.
"""

from __future__ import annotations

from typing import ClassVar

from .base import ToolCall, ToolParser, call_of, decode_at, skip_space
from .structural import CallFrame

__all__ = ["DeepSeekV3Parser", "DeepSeekV31Parser"]

CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
CALLS_END = "<｜tool▁calls▁end｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
CALL_END = "<｜tool▁call▁end｜>"
SEP = "<｜tool▁sep｜>"


class DeepSeekV31Parser(ToolParser):
    start = CALLS_BEGIN
    markers = (CALLS_BEGIN, CALLS_END, CALL_BEGIN, CALL_END, SEP)
    closing: ClassVar[str] = ""
    """What follows the arguments' JSON before the call's end (V3's code fence)."""
    frame = CallFrame(CALL_BEGIN, SEP, CALL_END, CALL_BEGIN)

    def parse(self, captured: str) -> tuple[list[ToolCall], str]:
        calls: list[ToolCall] = []
        pos = 0
        while captured.startswith(CALL_BEGIN, at := skip_space(captured, pos)):
            found = self._call(captured, at + len(CALL_BEGIN))
            if found is None:
                break
            calls.append(found[0])
            pos = found[1]
        at = skip_space(captured, pos)
        if captured.startswith(CALLS_END, at):
            pos = at + len(CALLS_END)
        return calls, captured[pos:]

    def _header(self, text: str, at: int) -> tuple[str, int] | None:
        """The call's name and where its JSON starts: ``NAME<｜tool▁sep｜>``."""
        sep = text.find(SEP, at)
        name = text[at:sep].strip() if sep >= 0 else ""
        return (name, sep + len(SEP)) if name else None

    def _call(self, text: str, at: int) -> tuple[ToolCall, int] | None:
        """The call whose header starts at ``at``, and the index after its end tag."""
        header = self._header(text, at)
        got = decode_at(text, header[1]) if header else None
        call = call_of({"name": header[0], "arguments": got[0]}) if header and got else None
        if got is None or call is None:
            return None
        end = skip_space(text, got[1])
        if self.closing:
            if not text.startswith(self.closing, end):
                return None
            end = skip_space(text, end + len(self.closing))
        return (call, end + len(CALL_END)) if text.startswith(CALL_END, end) else None


class DeepSeekV3Parser(DeepSeekV31Parser):
    closing = "```"
    frame = CallFrame(CALLS_BEGIN + CALL_BEGIN + "function" + SEP, "\n```json\n",
                      "\n```" + CALL_END + CALLS_END, CALLS_BEGIN)

    def _header(self, text: str, at: int) -> tuple[str, int] | None:
        """``function<｜tool▁sep｜>NAME`` then a ``json`` code fence."""
        head = "function" + SEP
        newline = text.find("\n", at + len(head)) if text.startswith(head, at) else -1
        name = text[at + len(head):newline].strip() if newline >= 0 else ""
        fence = skip_space(text, newline) if newline >= 0 else 0
        if not name or not text.startswith("```json", fence):
            return None
        return name, fence + len("```json")
