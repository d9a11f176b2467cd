"""``gpt-oss``: harmony channels read as SGLang 0.5.23's GptOssDetector (its
HarmonyParser) reads them.

Each message ``[<|start|>assistant]<|channel|>HEADER<|message|>BODY`` up to ``<|end|>``,
``<|call|>`` or ``<|return|>`` (or the end of the completion) goes by its header:

| header | becomes |
| --- | --- |
| ``analysis`` | reasoning |
| ``final`` | content |
| ``commentary`` without ``to=`` (a preamble) | content |
| holding ``to=`` (a tool call) | content as written, markers included, for the tool parser |

Headers and markers are never shown otherwise. Text outside any message is content
(SGLang holds it back for good); a header the completion cut off shows nothing.
Streaming and whole input give the same parts joined.
"""

from __future__ import annotations

from .harmony import CALL, CHANNEL, END, MARKERS, MESSAGE, RETURN, START
from .segments import Held, partial_tag

__all__ = ["HarmonyReasoning"]

Part = tuple[str, str]
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

