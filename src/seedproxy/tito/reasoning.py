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

``gpt-oss`` reads harmony's channels instead (``HarmonyReasoning``), as SGLang
0.5.23's GptOssDetector (its HarmonyParser) reads them. Each message
``[<|start|>assistant]<|channel|>HEADER<|message|>BODY`` up to ``<|end|>``,
``<|call|>`` or ``<|return|>`` (or the end of the completion) goes by its header:

| header | becomes |
| --- | --- |
| ``analysis`` | reasoning |
| ``final`` | content |
| ``commentary`` without ``to=`` (a preamble) | content |
| holding ``to=`` (a tool call) | content as written, markers included, for the tool parser |

Headers and markers are never shown otherwise. Text outside any message is content
(SGLang holds it back for good); a header the completion cut off shows nothing.

``Held`` trims a segment: leading whitespace is dropped, trailing whitespace is held
until something follows it, so a segment streamed piece by piece equals the same
segment given whole, stripped (a continued message keeps its leading whitespace:
it follows the client's text).
"""

from __future__ import annotations

from typing import ClassVar, Protocol

from ..stop_strings import partial_tag
from .harmony import CALL, CHANNEL, END, MARKERS, MESSAGE, RETURN, START

__all__ = ["REASONING_PARSERS", "HarmonyReasoning", "Held", "ReasoningParser", "ThinkParser"]

Part = tuple[str, str]


class Held:
    """Strips one segment while it streams; ``feed`` returns what can be shown now."""

    def __init__(self, *, strip_leading: bool = True) -> None:
        self._started = not strip_leading
        self._pending = ""

    def feed(self, text: str) -> str:
        if not self._started:
            text = text.lstrip()
            if not text:
                return ""
            self._started = True
        text = self._pending + text
        body = text.rstrip()
        self._pending = text[len(body):]
        return body


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


_OPENS = (START, CHANNEL)
_ENDS = (END, CALL, RETURN)


def _first(text: str, tags: tuple[str, ...]) -> tuple[int, str]:
    """The earliest of ``tags`` in ``text`` (-1, "" when none is there)."""
    found = [(at, tag) for tag in tags if (at := text.find(tag)) >= 0]
    return min(found) if found else (-1, "")


def _kind(header: str) -> str:
    """What a message's body becomes, from its header (the text before <|message|>)."""
    if "to=" in header:
        return "raw"
    channel = header.split(CHANNEL, 1)[1].strip() if CHANNEL in header else ""
    return "reasoning" if channel.lower().startswith("analysis") else "content"


class HarmonyReasoning:
    """Fed decoded text (harmony markers kept), returns reasoning and content parts
    (``reasoning.ReasoningParser``)."""

    def __init__(self, *, opened: bool = False) -> None:
        """``opened`` is not read: harmony's headers say where reasoning is."""
        self._buffer = ""
        self._reasoning = Held()
        self._where = "outside"  # "outside", "header", or the body's kind
        self._header = ""

    @classmethod
    def markers(cls) -> tuple[str, ...]:
        return MARKERS

    def feed(self, text: str) -> list[Part]:
        self._buffer += text
        parts: list[Part] = []
        while self._buffer:
            if self._where == "outside":
                at, tag = _first(self._buffer, _OPENS)
                if at < 0:
                    keep = max(partial_tag(self._buffer, t) for t in _OPENS)
                    self._emit(parts, "content", self._buffer[:len(self._buffer) - keep])
                    self._buffer = self._buffer[len(self._buffer) - keep:]
                    return parts
                self._emit(parts, "content", self._buffer[:at])
                self._buffer, self._where, self._header = self._buffer[at:], "header", ""
            elif self._where == "header":
                at = self._buffer.find(MESSAGE)
                if at < 0:
                    return parts  # the header is shown (or not) once it is whole
                self._header, self._buffer = self._buffer[:at], self._buffer[at + len(MESSAGE):]
                self._where = _kind(self._header)
                if self._where == "raw":
                    self._emit(parts, "content", self._header + MESSAGE)
            else:
                at, tag = _first(self._buffer, _ENDS)
                if at < 0:
                    keep = max(partial_tag(self._buffer, t) for t in _ENDS)
                    self._emit(parts, self._where, self._buffer[:len(self._buffer) - keep])
                    self._buffer = self._buffer[len(self._buffer) - keep:]
                    return parts
                body = self._buffer[:at] + (tag if self._where == "raw" else "")
                self._emit(parts, self._where, body)
                self._buffer, self._where = self._buffer[at + len(tag):], "outside"
        return parts

    def finish(self) -> list[Part]:
        rest, self._buffer = self._buffer, ""
        parts: list[Part] = []
        if self._where != "header":  # a header cut off shows nothing
            self._emit(parts, "content" if self._where in ("outside", "raw") else self._where,
                       rest)
        return parts

    def _emit(self, parts: list[Part], kind: str, text: str) -> None:
        if kind == "raw":
            kind = "content"
        if not text:
            return
        if kind == "reasoning":
            text = self._reasoning.feed(text)
            if not text:
                return
        parts.append((kind, text))


REASONING_PARSERS: dict[str, type[ReasoningParser]] = {
    "think": ThinkParser, "qwen3": Qwen3Parser, "qwen3-thinking": Qwen3ThinkingParser,
    "glm45": Qwen3Parser, "deepseek-r1": DeepSeekR1Parser, "kimi_k2": KimiK2Parser,
    "kimi": KimiParser, "gpt-oss": HarmonyReasoning,
}
