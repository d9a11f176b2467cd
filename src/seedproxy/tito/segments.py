"""Text split into parts as it streams, holding back what the next piece may change.

``Held`` trims a segment: leading whitespace is dropped, trailing whitespace is held
until something follows it, so a segment streamed piece by piece equals the same
segment given whole, stripped (a continued message keeps its leading whitespace:
it follows the client's text). ``partial_tag`` (``seedproxy.stop_strings``) finds a
tail that may begin a tag.
"""

from __future__ import annotations

from ..stop_strings import partial_tag

__all__ = ["Held", "partial_tag"]


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
