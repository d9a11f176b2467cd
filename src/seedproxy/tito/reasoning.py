"""Reasoning parsers by the names of SGLang's ``--reasoning-parser``.

Fed decoded text piece by piece, a parser returns ``(kind, text)`` parts:
``"reasoning"`` inside the tags, ``"content"`` outside; the tags themselves are never
shown. A completion starts in reasoning when it opens with the tag (after whitespace),
when its prompt already opened it, or always for a *forced* parser (DeepSeek-R1 and
thinking-only Qwen3 write no opening tag: their templates did); a forced parser still
drops an opening tag the model writes. Where SGLang's detector has a tool start token,
that token ends the reasoning too and stays in the content (for the tool parser).
Streaming and whole input give the same parts joined.

| name | tags | forced | tool start |
| --- | --- | --- | --- |
| ``think`` | ``<think>`` ``</think>`` | no | none |
| ``qwen3``, ``glm45`` | ``<think>`` ``</think>`` | no | ``<tool_call>`` |
| ``qwen3-thinking`` | ``<think>`` ``</think>`` | yes | ``<tool_call>`` |
| ``deepseek-r1`` | ``<think>`` ``</think>`` | yes | none |
| ``kimi_k2`` | ``<think>`` ``</think>`` | no | ``<|tool_calls_section_begin|>`` |
| ``kimi`` | ``◁think▷`` ``◁/think▷`` | no | none |

``gpt-oss`` reads harmony's channels instead (``reasoning_harmony``).
"""

from __future__ import annotations

from typing import ClassVar, Protocol

from .reasoning_harmony import HarmonyReasoning
from .segments import Held, partial_tag

__all__ = ["REASONING_PARSERS", "ReasoningParser", "ThinkParser"]

Part = tuple[str, str]


class ReasoningParser(Protocol):
    """What every reasoning parser offers (one per answer choice)."""

    def __init__(self, *, opened: bool = False) -> None: ...

    @classmethod
    def markers(cls) -> tuple[str, ...]:
        """The tags this parser reads (kept in the decoded text)."""
        ...

    def feed(self, text: str) -> list[Part]:
        """The (kind, text) parts ``text`` completes."""
        ...

    def finish(self) -> list[Part]:
        """What is left once the completion has ended."""
        ...


class ThinkParser:
    open_tag: ClassVar[str] = "<think>"
    close_tag: ClassVar[str] = "</think>"
    forced: ClassVar[bool] = False
    tool_start: ClassVar[str] = ""

    def __init__(self, *, opened: bool = False) -> None:
        self._state = "reasoning" if opened else "start"
        self._buffer = ""
        self._reasoning = Held()

    @classmethod
    def markers(cls) -> tuple[str, ...]:
        """The tags this parser reads (kept in the decoded text)."""
        return tuple(t for t in (cls.open_tag, cls.close_tag, cls.tool_start) if t)

    def feed(self, text: str) -> list[Part]:
        self._buffer += text
        parts: list[Part] = []
        if self._state == "start":
            head = self._buffer.lstrip()
            if head.startswith(self.open_tag):
                self._buffer = head[len(self.open_tag):]
                self._state = "reasoning"
            elif self.open_tag.startswith(head):
                return parts  # still may be the tag
            else:
                self._state = "reasoning" if self.forced else "content"
        if self._state == "reasoning":
            end, size = self._end(self._buffer)
            if end < 0:
                keep = max(partial_tag(self._buffer, t) for t in self._ends())
                shown = self._reasoning.feed(self._buffer[: len(self._buffer) - keep])
                self._buffer = self._buffer[len(self._buffer) - keep:]
                return [("reasoning", shown)] if shown else parts
            shown = self._reasoning.feed(self._buffer[:end])
            if shown:
                parts.append(("reasoning", shown))
            self._buffer = self._buffer[end + size:]
            self._state = "content"
        if self._state == "content" and self._buffer:
            parts.append(("content", self._buffer))
            self._buffer = ""
        return parts

    def finish(self) -> list[Part]:
        """What is left once the completion has ended."""
        rest, self._buffer = self._buffer, ""
        if self._state == "start" and self.forced:
            rest = rest.lstrip()
            self._state = "reasoning"
        if self._state == "reasoning":
            shown = self._reasoning.feed(rest)
            return [("reasoning", shown)] if shown else []
        return [("content", rest)] if rest else []

    def _ends(self) -> tuple[str, ...]:
        return (self.close_tag, self.tool_start) if self.tool_start else (self.close_tag,)

    def _end(self, text: str) -> tuple[int, int]:
        """Where the reasoning ends in ``text`` and how much of it to drop there: the
        close tag is dropped, a tool start is kept (-1 when neither is there)."""
        close = text.find(self.close_tag)
        tool = text.find(self.tool_start) if self.tool_start else -1
        if tool >= 0 and (close < 0 or tool < close):
            return tool, 0
        return close, len(self.close_tag)


class Qwen3Parser(ThinkParser):
    tool_start = "<tool_call>"


class Qwen3ThinkingParser(Qwen3Parser):
    forced = True


class DeepSeekR1Parser(ThinkParser):
    forced = True


class KimiK2Parser(ThinkParser):
    tool_start = "<|tool_calls_section_begin|>"


class KimiParser(ThinkParser):
    open_tag = "◁think▷"
    close_tag = "◁/think▷"


REASONING_PARSERS: dict[str, type[ReasoningParser]] = {
    "think": ThinkParser, "qwen3": Qwen3Parser, "qwen3-thinking": Qwen3ThinkingParser,
    "glm45": Qwen3Parser, "deepseek-r1": DeepSeekR1Parser, "kimi_k2": KimiK2Parser,
    "kimi": KimiParser, "gpt-oss": HarmonyReasoning,
}
