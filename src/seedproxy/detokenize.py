"""Incremental detokenisation, safe for characters split across tokens: the rule the
proxy's token-in-token-out mode and the engine share.

Invariants:
- Text is released only when the decoded window does not end in U+FFFD (an incomplete
  UTF-8 sequence); the window keeps the ids since the release before last as context,
  so a token decoded differently at a string's start (leading spaces) agrees with a
  whole decode.
- The released text plus ``pending`` is the decoding of every id fed (``hidden`` ones
  aside); a window that does not extend its context falls back to a whole decode.

``tokenizers.decoders.DecodeStream`` exposes neither ``pending`` nor a decode other than
a ``tokenizers.Tokenizer``'s (mistral-common's, a slow tokenizer's).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["Decode", "IncrementalDecoder", "decoder_of"]

_REPLACEMENT = "\ufffd"

Decode = Callable[[list[int]], str]


def decoder_of(tokenizer: Any) -> Decode:
    """``tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)``,
    through a fast (Rust) tokenizer's backend directly (less the wrapper's cost)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None and callable(getattr(backend, "decode", None)):
        def fast(ids: list[int]) -> str:
            text: str = backend.decode(ids, skip_special_tokens=False)
            return text
        return fast

    def slow(ids: list[int]) -> str:
        text: str = tokenizer.decode(ids, skip_special_tokens=False,
                                     clean_up_tokenization_spaces=False)
        return text
    return slow


class IncrementalDecoder:
    """Feeds one answer's ids through ``decode``; ``hidden`` ids (end of turn, say)
    produce no text."""

    def __init__(self, decode: Decode, hidden: frozenset[int] = frozenset()) -> None:
        self._decode = decode
        self._hidden = hidden
        self._ids: list[int] = []
        self._prefix = 0
        self._read = 0
        self._before: str | None = ""  # decode(ids[prefix:read]); None: not yet computed
        self._released = 0  # characters released so far
        self.pending = ""
        """The text of the ids fed since the last release (may end in U+FFFD)."""

    def _window_before(self) -> str:
        if self._before is None:
            self._before = self._decode(self._ids[self._prefix:self._read])
        return self._before

    def _piece(self) -> str:
        before = self._window_before()
        now = self._decode(self._ids[self._prefix:])
        if now.startswith(before):
            return now[len(before):]
        return self._decode(self._ids)[self._released:]

    def _release(self, piece: str) -> str:
        self._prefix, self._read = self._read, len(self._ids)
        self._before = None
        self._released += len(piece)
        self.pending = ""
        return piece

    def feed(self, token_id: int) -> str:
        """The text that ``token_id`` completes (possibly empty)."""
        if token_id in self._hidden:
            return ""
        self._ids.append(token_id)
        piece = self._piece()
        if piece and not piece.endswith(_REPLACEMENT):
            return self._release(piece)
        self.pending = piece
        return ""

    def finish(self) -> str:
        """Whatever is still held (an incomplete character decodes as U+FFFD)."""
        return self._release(self._piece())
