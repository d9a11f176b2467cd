"""The ``<think>...</think>`` reasoning parser (Qwen3, DeepSeek-R1 style).

Fed decoded text piece by piece, it returns ``(kind, text)`` parts: ``"reasoning"``
inside the tags, ``"content"`` outside. A completion that opens with the tag (after
whitespace), or whose prompt already opened it, starts in reasoning; the tags
themselves are never shown. Streaming and whole input give the same parts joined.
"""

from __future__ import annotations

from .segments import Held, partial_tag

__all__ = ["REASONING_PARSERS", "ThinkParser"]

Part = tuple[str, str]


class ThinkParser:
    open_tag = "<think>"
    close_tag = "</think>"

    def __init__(self, *, opened: bool = False) -> None:
        self._state = "reasoning" if opened else "start"
        self._buffer = ""
        self._reasoning = Held()

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
                self._state = "content"
        if self._state == "reasoning":
            end = self._buffer.find(self.close_tag)
            if end < 0:
                keep = partial_tag(self._buffer, self.close_tag)
                shown = self._reasoning.feed(self._buffer[: len(self._buffer) - keep])
                self._buffer = self._buffer[len(self._buffer) - keep:]
                return [("reasoning", shown)] if shown else parts
            shown = self._reasoning.feed(self._buffer[:end])
            if shown:
                parts.append(("reasoning", shown))
            self._buffer = self._buffer[end + len(self.close_tag):]
            self._state = "content"
        if self._state == "content" and self._buffer:
            parts.append(("content", self._buffer))
            self._buffer = ""
        return parts

    def finish(self) -> list[Part]:
        """What is left once the completion has ended."""
        rest, self._buffer = self._buffer, ""
        if self._state == "reasoning":
            shown = self._reasoning.feed(rest)
            return [("reasoning", shown)] if shown else []
        return [("content", rest)] if rest else []


REASONING_PARSERS: dict[str, type[ThinkParser]] = {"think": ThinkParser, "qwen3": ThinkParser,
                                                   "deepseek-r1": ThinkParser}
