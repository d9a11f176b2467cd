"""Token ids kept as a packed array together with their JSON text.

A long rollout's prompt is tens of thousands of ids. Turning them into a Python list
(and back) costs a Python object per id on every turn; ``TokenIds`` holds them as an
``array('i')`` and, alongside, their compact JSON text (``1,2,3``, no brackets),
which a turn extends with only what it adds. ``orjson_default`` writes a ``TokenIds``
into a JSON body as that text, so a request carrying one costs a copy of its bytes.
Invariant: ``text`` is always exactly ``orjson.dumps(ids.tolist())[1:-1]``.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from typing import Any

import orjson

__all__ = ["TokenIds", "ids_text", "join_text", "orjson_default"]


def ids_text(ids: Iterable[int]) -> bytes:
    """The compact JSON text of ``ids`` without brackets: ``b"1,2,3"``."""
    values = ids.tolist() if isinstance(ids, array) else list(ids)
    return orjson.dumps(values)[1:-1]


def join_text(text: bytes, more: bytes) -> bytes:
    """The text of two id sequences one after the other."""
    if not text:
        return more
    return text + b"," + more if more else text


class TokenIds:
    """Ids and their JSON text, built together (see the module's invariant)."""

    __slots__ = ("ids", "text")

    def __init__(self, ids: array[int], text: bytes | None = None) -> None:
        self.ids = ids
        self.text = ids_text(ids) if text is None else text

    def extended(self, more: Iterable[int]) -> TokenIds:
        """A new ``TokenIds``: these ids, then ``more`` (its cost: ``more``, and a copy)."""
        added = more if isinstance(more, array) else array("i", more)
        return TokenIds(self.ids + added, join_text(self.text, ids_text(added)))

    def tolist(self) -> list[int]:
        return self.ids.tolist()

    def __len__(self) -> int:
        return len(self.ids)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TokenIds):
            return self.ids == other.ids
        if isinstance(other, list):
            return self.ids.tolist() == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"TokenIds({len(self.ids)} ids)"


def orjson_default(value: Any) -> Any:
    """orjson's ``default``: a ``TokenIds`` as its JSON text; anything else unsupported."""
    if isinstance(value, TokenIds):
        return orjson.Fragment(b"[" + value.text + b"]")
    raise TypeError(f"Type is not JSON serializable: {type(value).__name__}")
