"""Incremental detokenisation with stop strings.

Invariants:
- ``text`` is always the decoding of all output ids so far, cut at the first stop string
  (kept when ``no_stop_trim``), so the final text does not depend on streaming.
- ``stable_text`` is a prefix of every later ``text``: it withholds a trailing incomplete
  UTF-8 sequence and any tail that could still grow into a stop string, so streamed deltas
  concatenate to exactly the final text.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TextState"]


class TextState:
    """Decoded text of a growing list of output ids, watching for stop strings."""

    def __init__(self, tokenizer: Any, stops: tuple[str, ...], skip_special_tokens: bool,
                 no_stop_trim: bool = False) -> None:
        self._tok = tokenizer
        self._stops = stops
        self._skip = skip_special_tokens
        self._keep = no_stop_trim
        self._max_stop = max((len(s) for s in stops), default=0)
        self.text = ""
        self.matched: str | None = None

    def update(self, output_ids: list[int]) -> str | None:
        """Re-decode ``output_ids``; return the stop string matched now, if any."""
        full = self._tok.decode(output_ids, skip_special_tokens=self._skip)
        if self._stops:
            start = max(0, len(self.text) - self._max_stop)
            best: tuple[int, str] | None = None
            for stop in self._stops:
                idx = full.find(stop, start)
                if idx >= 0 and (best is None or idx < best[0]):
                    best = (idx, stop)
            if best is not None:
                idx, stop = best
                self.text = full[: idx + len(stop)] if self._keep else full[:idx]
                self.matched = stop
                return stop
        self.text = full
        return None

    def stable_text(self, finished: bool) -> str:
        """The part of ``text`` that later tokens cannot change."""
        if finished:
            return self.text
        text = self.text.rstrip("\ufffd")
        for k in range(min(self._max_stop - 1, len(text)), 0, -1):
            tail = text[-k:]
            if any(s.startswith(tail) for s in self._stops):
                return text[:-k]
        return text
