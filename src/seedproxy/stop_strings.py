"""Stop strings in decoded text, for token-in-token-out mode and the engine. The text
ends at the earliest stop string found (the one listed first at a tie); while it
streams, a tail that could still grow into one is held back, so shown pieces
concatenate to the final text."""

from __future__ import annotations

__all__ = ["StopTrim", "first_stop", "held_tail", "partial_tag"]


def partial_tag(text: str, tag: str) -> int:
    """Length of the longest tail of ``text`` that is a proper prefix of ``tag``."""
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:size]):
            return size
    return 0


def held_tail(text: str, stops: tuple[str, ...]) -> int:
    """Length of the longest tail of ``text`` that may begin one of ``stops``."""
    return max((partial_tag(text, s) for s in stops), default=0)


def first_stop(text: str, stops: tuple[str, ...], start: int = 0) -> tuple[int, str] | None:
    """Where the earliest of ``stops`` begins in ``text`` at or after ``start``, and which."""
    hits = [(at, stop) for stop in stops if (at := text.find(stop, start)) >= 0]
    return min(hits, key=lambda hit: hit[0], default=None)


class StopTrim:
    """Cuts streamed text at the first of ``stops``; ``feed`` returns what can be shown."""

    def __init__(self, stops: tuple[str, ...]) -> None:
        self._stops = stops
        self._buffer = ""
        self._stopped = False

    def feed(self, text: str) -> str:
        if self._stopped:
            return ""
        self._buffer += text
        hit = first_stop(self._buffer, self._stops)
        if hit is not None:
            self._stopped = True
            shown, self._buffer = self._buffer[:hit[0]], ""
            return shown
        cut = len(self._buffer) - held_tail(self._buffer, self._stops)
        shown, self._buffer = self._buffer[:cut], self._buffer[cut:]
        return shown

    def finish(self) -> str:
        rest, self._buffer = ("" if self._stopped else self._buffer), ""
        return rest
