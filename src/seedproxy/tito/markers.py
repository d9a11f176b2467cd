"""Parser markers read from token ids, not from text.

Where a parser's marker (``<tool_call>``) is one added token of the tokenizer, the model
opens a call by sampling that id; the same characters spelled by ordinary tokens
(``<``, ``tool``, ``_call``, ``>``) are text the model wrote. ``MarkerGuard`` sits between
the decoder and the parsers: a marker's text that did not come from its id reaches the
parsers *defused* (its first character swapped for a Unicode noncharacter, U+FDD0 on),
so no text-based parser sees a marker there; ``restore`` gives the characters back on
everything shown (content, reasoning, tool-call names and arguments). Text is held
only while it ends in a proper prefix of a marker.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..stop_strings import held_tail

__all__ = ["MarkerGuard", "id_markers"]

_FIRST = 0xFDD0  # the 32 noncharacters U+FDD0..U+FDEF: never a tokenizer's text


def id_markers(tokenizer: Any, texts: Iterable[str]) -> dict[int, str]:
    """The markers among ``texts`` that are one added token each (id -> text)."""
    added = tokenizer.get_added_vocab()
    return {added[text]: text for text in texts if isinstance(added.get(text), int)
            and list(tokenizer.encode(text, add_special_tokens=False)) == [added[text]]}


class MarkerGuard:
    """One answer's guard over the markers ``by_id`` (id -> text); at most 32 distinct
    first characters."""

    def __init__(self, by_id: Mapping[int, str]) -> None:
        self._by_id = dict(by_id)
        self._texts = tuple(sorted(set(by_id.values())))
        firsts = sorted({t[0] for t in self._texts})
        if len(firsts) > 32:
            raise ValueError("at most 32 distinct marker first characters")
        self._escape = {c: chr(_FIRST + k) for k, c in enumerate(firsts)}
        self._back = str.maketrans({v: k for k, v in self._escape.items()})
        self._held = ""

    def feed(self, token_id: int, text: str) -> str:
        """The text to parse for ``text``, what the decoder released at ``token_id``."""
        marker = self._by_id.get(token_id)
        if marker is not None and text.endswith(marker):
            return self._defuse(self._held + text[:-len(marker)], final=True) + marker
        return self._defuse(self._held + text, final=False)

    def finish(self, text: str = "") -> str:
        """The text to parse for the decoder's last ``text``, and whatever was held."""
        return self._defuse(self._held + text, final=True)

    def restore(self, text: str) -> str:
        """``text`` with every defused marker spelled as the model wrote it."""
        return text.translate(self._back)

    def _defuse(self, text: str, *, final: bool) -> str:
        for marker in self._texts:
            if marker in text:
                text = text.replace(marker, self._escape[marker[0]] + marker[1:])
        keep = 0 if final else held_tail(text, self._texts)
        self._held = text[len(text) - keep:]
        return text[:len(text) - keep]
