"""An in-memory index of ids in increasing sequence order: the memory store's views.

Ids are added in increasing sequence order (the store hands out sequences under its
lock), so the index is an append-only list searched by bisection; removal leaves a
hole that reads skip, and the list is compacted once holes outnumber entries. A read
costs O(log n + what it returns + holes it crosses), and holes never exceed entries.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator

__all__ = ["SeqIndex"]


class SeqIndex:
    """Not thread-safe on its own: the memory store calls it under its lock."""

    def __init__(self) -> None:
        self._seqs: list[int] = []
        self._ids: list[str | None] = []
        self._at: dict[str, int] = {}
        self._head = 0
        """Everything before it is a hole (exports take from the front)."""

    def __len__(self) -> int:
        return len(self._at)

    def add(self, seq: int, item: str) -> None:
        if self._seqs and seq <= self._seqs[-1]:
            raise ValueError(f"sequence {seq} is not above {self._seqs[-1]}")
        self.remove(item)
        self._at[item] = len(self._ids)
        self._seqs.append(seq)
        self._ids.append(item)

    def remove(self, item: str) -> None:
        at = self._at.pop(item, None)
        if at is None:
            return
        self._ids[at] = None
        while self._head < len(self._ids) and self._ids[self._head] is None:
            self._head += 1
        if len(self._ids) - self._head > 2 * len(self._at) + 32:
            self._compact()

    def _compact(self) -> None:
        kept = [(s, i) for s, i in zip(self._seqs, self._ids, strict=True) if i is not None]
        self._seqs = [s for s, _ in kept]
        self._ids = [i for _, i in kept]
        self._at = {i: n for n, (_, i) in enumerate(kept)}
        self._head = 0

    def after(self, seq: int) -> Iterator[str]:
        """Ids with a sequence above ``seq``, in order (a live view: consume it under
        the same lock)."""
        ids = self._ids
        for n in range(max(self._head, bisect.bisect_right(self._seqs, seq)), len(ids)):
            item = ids[n]
            if item is not None:
                yield item
