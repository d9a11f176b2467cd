"""Incremental detokenisation, safe for characters split across tokens.

Text is released only when the decoded window does not end in U+FFFD (an incomplete
UTF-8 sequence); the window keeps a few tokens of context so that tokenizers that
decode a token differently at the start of a string (leading spaces) agree with a
whole decode. Ids are fed one at a time on every path, so a stream and a whole
answer produce the same text.
"""

from __future__ import annotations

from typing import Any

__all__ = ["IncrementalDecoder"]

_REPLACEMENT = "\ufffd"


class IncrementalDecoder:
    def __init__(self, tokenizer: Any, hidden: frozenset[int]) -> None:
        self._tokenizer = tokenizer
        self._hidden = hidden
        self._ids: list[int] = []
        self._prefix = 0
        self._read = 0

    def _decode(self, ids: list[int]) -> str:
        text: str = self._tokenizer.decode(ids, skip_special_tokens=False,
                                           clean_up_tokenization_spaces=False)
        return text

    def feed(self, token_id: int) -> str:
        """The text that ``token_id`` completes (possibly empty)."""
        if token_id in self._hidden:
            return ""
        self._ids.append(token_id)
        before = self._decode(self._ids[self._prefix:self._read])
        now = self._decode(self._ids[self._prefix:])
        if len(now) > len(before) and not now.endswith(_REPLACEMENT):
            self._prefix, self._read = self._read, len(self._ids)
            return now[len(before):]
        return ""

    def finish(self) -> str:
        """Whatever is still held (an incomplete character decodes as U+FFFD)."""
        before = self._decode(self._ids[self._prefix:self._read])
        now = self._decode(self._ids[self._prefix:])
        self._prefix = self._read = len(self._ids)
        return now[len(before):] if len(now) > len(before) else ""
