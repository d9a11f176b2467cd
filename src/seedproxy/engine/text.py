"""Decoded output text with stop strings (``seedproxy.detokenize``,
``seedproxy.stop_strings``) and ``stop_regex`` (SGLang's ``FINISHED_MATCHED_REGEX``).

Invariants:
- ``text`` is always the decoding of all output ids so far, cut at the first stop string
  (kept when ``no_stop_trim``), so the final text does not depend on streaming; each token
  costs the tokenizer O(1).
- ``stable_text`` is a prefix of every later ``text``: it withholds a trailing incomplete
  UTF-8 sequence and any tail that could still grow into a stop string.
"""

from __future__ import annotations

import re
from typing import Any

from ..detokenize import IncrementalDecoder
from ..stop_strings import first_stop, held_tail

__all__ = ["TextState", "match_stop_regex"]


class TextState:
    """Decoded text of a growing list of output ids, watching for stop strings."""

    def __init__(self, tokenizer: Any, stops: tuple[str, ...], skip_special_tokens: bool,
                 no_stop_trim: bool = False) -> None:
        self._decoder = IncrementalDecoder(
            lambda ids: str(tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)))
        self._stops = stops
        self._keep = no_stop_trim
        self._max_stop = max((len(s) for s in stops), default=0)
        self._fed = 0
        self._done = ""  # the text the decoder released
        self.text = ""
        self.matched: str | None = None

    def update(self, output_ids: list[int]) -> str | None:
        """Decode the new ids of ``output_ids``; return the stop string matched now, if any.

        ``output_ids`` must extend the list passed before.
        """
        self._done += "".join(self._decoder.feed(i) for i in output_ids[self._fed:])
        self._fed = len(output_ids)
        full = self._done + self._decoder.pending
        hit = first_stop(full, self._stops, max(0, len(self.text) - self._max_stop))
        if hit is not None:
            at, stop = hit
            self.text = full[: at + len(stop)] if self._keep else full[:at]
            self.matched = stop
            return stop
        self.text = full
        return None

    def stable_text(self, finished: bool) -> str:
        """The part of ``text`` that later tokens cannot change."""
        if finished:
            return self.text
        text = self.text.rstrip("\ufffd")
        keep = held_tail(text, self._stops)
        return text[: len(text) - keep]


def match_stop_regex(patterns: tuple[str, ...], text: str) -> str | None:
    """The first of ``patterns`` found anywhere in ``text``, or None."""
    return next((pat for pat in patterns if re.search(pat, text)), None)
