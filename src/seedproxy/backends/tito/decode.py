"""Incremental detokenisation, safe for characters split across tokens.

Text is released only when the decoded window does not end in U+FFFD (an incomplete
UTF-8 sequence); the window keeps a few tokens of context so that tokenizers that
decode a token differently at the start of a string (leading spaces) agree with a
whole decode. Ids are fed one at a time on every path, so a stream and a whole
answer produce the same text.

A fast (Rust) tokenizer is decoded through its backend directly: that is what
``tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)``
does, less the wrapper's per-call cost. The text of the window before the newest token
is kept until the window moves, so a token costs one decode, two when it releases text.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["IncrementalDecoder", "decoder_of"]

_REPLACEMENT = "\ufffd"

Decode = Callable[[list[int]], str]


def decoder_of(tokenizer: Any) -> Decode:
    """Decode ids to text with special tokens kept and no clean-up of spaces."""
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
    """Feeds one answer's ids; ``hidden`` ids (end of turn, say) produce no text."""

    def __init__(self, tokenizer: Any, hidden: frozenset[int], *,
                 decode: Decode | None = None) -> None:
        self._decode = decode if decode is not None else decoder_of(tokenizer)
        self._hidden = hidden
        self._ids: list[int] = []
        self._prefix = 0
        self._read = 0
        self._before: str | None = ""  # decode(ids[prefix:read]); None: not yet computed

    def _window_before(self) -> str:
        if self._before is None:
            self._before = self._decode(self._ids[self._prefix:self._read])
        return self._before

    def feed(self, token_id: int) -> str:
        """The text that ``token_id`` completes (possibly empty)."""
        if token_id in self._hidden:
            return ""
        self._ids.append(token_id)
        before = self._window_before()
        now = self._decode(self._ids[self._prefix:])
        if len(now) > len(before) and not now.endswith(_REPLACEMENT):
            self._prefix, self._read = self._read, len(self._ids)
            self._before = None
            return now[len(before):]
        return ""

    def finish(self) -> str:
        """Whatever is still held (an incomplete character decodes as U+FFFD)."""
        before = self._window_before()
        now = self._decode(self._ids[self._prefix:])
        self._prefix = self._read = len(self._ids)
        self._before = None
        return now[len(before):] if len(now) > len(before) else ""
