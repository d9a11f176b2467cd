"""Incremental detokenisation with stop strings.

Invariants:
- ``text`` is always the decoding of all output ids so far, cut at the first stop string
  (kept when ``no_stop_trim``), so the final text does not depend on streaming.
- Each token costs the tokenizer O(1): only the ids since the last complete character
  are decoded (a window ``[prefix, read)`` of context plus the new ids), and the text is
  extended at character boundaries. Concatenating those pieces equals a full decode for
  tokenizers whose decode is per-token bytes (byte-level BPE: Llama 3, Qwen, SmolLM2).
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
        self._done = ""  # text of output_ids[:self._read], ending on a character boundary
        self._prefix = 0
        self._read = 0

    def _decode(self, ids: list[int]) -> str:
        return str(self._tok.decode(ids, skip_special_tokens=self._skip))

    def update(self, output_ids: list[int]) -> str | None:
        """Decode the new ids of ``output_ids``; return the stop string matched now, if any.

        ``output_ids`` must extend the list passed before.
        """
        context = self._decode(output_ids[self._prefix: self._read])
        window = self._decode(output_ids[self._prefix:])
        if window.startswith(context):
            piece = window[len(context):]
            full = self._done + piece
        else:  # a decoder that rewrites earlier text: fall back to a full decode
            full = self._decode(output_ids)
            piece = full[len(self._done):]
        if piece and not piece.endswith("\ufffd"):
            self._done = full
            self._prefix, self._read = self._read, len(output_ids)
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
