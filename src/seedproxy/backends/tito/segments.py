"""Text split into parts as it streams, holding back what the next piece may change.

``Held`` trims a segment: leading whitespace is dropped, trailing whitespace is held
until something follows it, so a segment streamed piece by piece equals the same
segment given whole, stripped (a continued message keeps its leading whitespace:
it follows the client's text). ``partial_tag`` finds a tail that may begin a tag.
"""

from __future__ import annotations

__all__ = ["Held", "StopTrim", "partial_tag"]


def partial_tag(text: str, tag: str) -> int:
    """Length of the longest tail of ``text`` that is a proper prefix of ``tag``."""
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:size]):
            return size
    return 0


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


class StopTrim:
    """Cuts the text at the first of the client's ``stop`` strings (the sampled ids
    keep them; the message, as OpenAI servers show it, does not)."""

    def __init__(self, stops: tuple[str, ...]) -> None:
        self._stops = stops
        self._buffer = ""
        self._stopped = False

    def feed(self, text: str) -> str:
        if self._stopped:
            return ""
        self._buffer += text
        hits = [at for at in (self._buffer.find(s) for s in self._stops) if at >= 0]
        if hits:
            self._stopped = True
            shown, self._buffer = self._buffer[: min(hits)], ""
            return shown
        keep = max((partial_tag(self._buffer, s) for s in self._stops), default=0)
        shown = self._buffer[: len(self._buffer) - keep]
        self._buffer = self._buffer[len(self._buffer) - keep:]
        return shown

    def finish(self) -> str:
        rest, self._buffer = ("" if self._stopped else self._buffer), ""
        return rest
