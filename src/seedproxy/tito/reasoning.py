"""Reasoning parsers by the names of SGLang's ``--reasoning-parser``.

Fed decoded text piece by piece, a parser returns ``(kind, text)`` parts:
``"reasoning"`` inside the tags, ``"content"`` outside; the tags themselves are never
shown. A completion starts in reasoning when it opens with the tag (after whitespace),
when its prompt already opened it, or always for a *forced* parser (DeepSeek-R1 and
thinking-only Qwen3 write no opening tag: their templates did); a forced parser still
drops an opening tag the model writes. Where SGLang's detector has a tool start token,
that token ends the reasoning too and stays in the content (for the tool parser).
Streaming and whole input give the same parts joined.

``gpt-oss`` reads harmony's channels instead (``HarmonyReasoning``), as SGLang
0.5.23's GptOssDetector (its HarmonyParser) reads them. Each message
``[<|start|>assistant]<|channel|>HEADER<|message|>BODY`` up to ``<|end|>``,
``<|call|>`` or ``<|return|>`` (or the end of the completion) goes by its header
(``_kind``): ``analysis`` is reasoning; ``final`` and a ``commentary`` preamble are
content; a header holding ``to=`` (a tool call) is content as written, markers
included, for the tool parser. Headers and markers are never shown otherwise. Text
outside any message is content (SGLang holds it back for good); a header the
completion cut off shows nothing.
"""

from __future__ import annotations

from typing import ClassVar

from ..stop_strings import first_stop, held_tail
from .harmony import CALL, CHANNEL, END, MARKERS, MESSAGE, RETURN, START

__all__ = ["REASONING_PARSERS", "HarmonyReasoning", "Held", "ReasoningParser", "ThinkParser"]

Part = tuple[str, str]


class Held:
    """Strips one segment while it streams: leading whitespace is dropped (unless
    ``strip_leading`` is off: a continued message follows the client's text), trailing
    whitespace held until something follows, so a segment streamed piece by piece
    equals the segment given whole, stripped. ``feed`` returns what can be shown now."""

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


def _release(text: str, tags: tuple[str, ...]) -> tuple[str, str]:
    """``text`` less what may begin one of ``tags`` at its end, and that held tail."""
    cut = len(text) - held_tail(text, tags)
    return text[:cut], text[cut:]


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
            # The reasoning ends at the close tag (dropped) or a tool start (kept).
            hit = first_stop(self._buffer, self.markers()[1:])
            if hit is None:
                text, self._buffer = _release(self._buffer, self.markers()[1:])
                shown = self._reasoning.feed(text)
                return [("reasoning", shown)] if shown else parts
            end, tag = hit
            shown = self._reasoning.feed(self._buffer[:end])
            if shown:
                parts.append(("reasoning", shown))
            self._buffer = self._buffer[end + (len(tag) if tag == self.close_tag else 0):]
            self._state = "content"
        if self._state == "content" and self._buffer:
            parts.append(("content", self._buffer))
            self._buffer = ""
        return parts

    def finish(self) -> list[Part]:
        rest, self._buffer = self._buffer, ""
        if self._state == "start" and self.forced:
            rest = rest.lstrip()
            self._state = "reasoning"
        if self._state == "reasoning":
            shown = self._reasoning.feed(rest)
            return [("reasoning", shown)] if shown else []
        return [("content", rest)] if rest else []


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


def _kind(header: str) -> str:
    """What a message's body becomes, from its header (the text before <|message|>)."""
    if "to=" in header:
        return "raw"
    channel = header.split(CHANNEL, 1)[1].strip() if CHANNEL in header else ""
    return "reasoning" if channel.lower().startswith("analysis") else "content"


class HarmonyReasoning:
    """Fed decoded text (harmony markers kept), returns reasoning and content parts;
    ``opened`` is not read: harmony's headers say where reasoning is."""

    def __init__(self, *, opened: bool = False) -> None:
        self._buffer = ""
        self._reasoning = Held()
        self._where = "outside"  # "outside", "header", or the body's kind

    @classmethod
    def markers(cls) -> tuple[str, ...]:
        return MARKERS

    def feed(self, text: str) -> list[Part]:
        self._buffer += text
        parts: list[Part] = []
        while self._buffer:
            if self._where == "header":
                at = self._buffer.find(MESSAGE)
                if at < 0:
                    return parts  # the header is shown (or not) once it is whole
                header, self._buffer = self._buffer[:at], self._buffer[at + len(MESSAGE):]
                self._where = _kind(header)
                if self._where == "raw":
                    self._emit(parts, "content", header + MESSAGE)
                continue
            outside = self._where == "outside"
            tags = _OPENS if outside else _ENDS
            hit = first_stop(self._buffer, tags)
            if hit is None:
                text, self._buffer = _release(self._buffer, tags)
                self._emit(parts, self._where, text)
                return parts
            at, tag = hit
            self._emit(parts, self._where, self._buffer[:at] + (
                tag if self._where == "raw" else ""))
            self._buffer = self._buffer[at if outside else at + len(tag):]
            self._where = "header" if outside else "outside"
        return parts

    def finish(self) -> list[Part]:
        rest, self._buffer = self._buffer, ""
        parts: list[Part] = []
        if self._where != "header":  # a header cut off shows nothing
            self._emit(parts, self._where, rest)
        return parts

    def _emit(self, parts: list[Part], kind: str, text: str) -> None:
        """Adds ``text`` as reasoning for ``reasoning``, else as content."""
        if text and kind == "reasoning":
            text = self._reasoning.feed(text)
        if text:
            parts.append((kind if kind == "reasoning" else "content", text))


ReasoningParser = ThinkParser | HarmonyReasoning
"""One per answer choice: ``markers()`` (the tags it reads, kept in the decoded text),
``feed`` (the parts a piece of text completes) and ``finish`` (what is left at the end)."""

REASONING_PARSERS: dict[str, type[ReasoningParser]] = {
    "think": ThinkParser, "qwen3": Qwen3Parser, "qwen3-thinking": Qwen3ThinkingParser,
    "glm45": Qwen3Parser, "deepseek-r1": DeepSeekR1Parser, "kimi_k2": KimiK2Parser,
    "kimi": KimiParser, "gpt-oss": HarmonyReasoning,
}
