"""Per-sequence KV buffers and a bounded LRU cache of finished sequences' prefixes.

Invariants:
- A ``KVBuffer`` is laid out ``[layers, position, kv_heads, head_dim]``, so the view of
  positions ``a..b`` has the same strides whatever the buffer's capacity: attention over
  a copied or regrown buffer reads the same numbers in the same order.
- ``PrefixCache`` holds copies; a sequence never shares a buffer with the cache, so reuse
  is a bitwise copy of keys and values computed by the same forward pass.
- The cache's total size stays within its byte budget (least recently used go first);
  an entry whose tokens are a prefix of a newer entry's is dropped as redundant.
"""

from __future__ import annotations

from collections import OrderedDict

import torch

__all__ = ["KVBuffer", "PrefixCache"]


class KVBuffer:
    """Keys and values of one sequence; grows by doubling. ``length`` positions are valid."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, capacity: int) -> None:
        self.shape = (layers, kv_heads, head_dim)
        cap = max(1, capacity)
        self.k = torch.empty(layers, cap, kv_heads, head_dim)
        self.v = torch.empty(layers, cap, kv_heads, head_dim)
        self.length = 0

    @property
    def capacity(self) -> int:
        return int(self.k.shape[1])

    def nbytes(self) -> int:
        return 2 * self.k.numel() * 4

    def ensure(self, length: int) -> None:
        if length <= self.capacity:
            return
        cap = max(length, 2 * self.capacity)
        layers, heads, dim = self.shape
        k = torch.empty(layers, cap, heads, dim)
        v = torch.empty(layers, cap, heads, dim)
        k[:, : self.length].copy_(self.k[:, : self.length])
        v[:, : self.length].copy_(self.v[:, : self.length])
        self.k, self.v = k, v

    def copy_prefix(self, other: KVBuffer, length: int) -> None:
        """Make positions ``0..length-1`` a bitwise copy of ``other``'s."""
        self.ensure(length)
        self.k[:, :length].copy_(other.k[:, :length])
        self.v[:, :length].copy_(other.v[:, :length])
        self.length = length

    def trimmed(self) -> KVBuffer:
        """A copy holding exactly ``length`` positions (what the cache keeps)."""
        layers, heads, dim = self.shape
        out = KVBuffer(layers, heads, dim, self.length)
        out.copy_prefix(self, self.length)
        return out


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class PrefixCache:
    """Finished sequences' KV, keyed by their token ids; bounded by ``capacity_bytes``."""

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = max(0, capacity_bytes)
        self._entries: OrderedDict[int, tuple[list[int], KVBuffer]] = OrderedDict()
        self._next = 0
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, tokens: list[int]) -> tuple[int, KVBuffer | None]:
        """The longest cached common prefix with ``tokens`` and the buffer holding it."""
        best, best_key = 0, None
        for key, (cached, _) in self._entries.items():
            n = _common_prefix(cached, tokens)
            if n > best:
                best, best_key = n, key
        if best_key is None:
            return 0, None
        self._entries.move_to_end(best_key)
        return best, self._entries[best_key][1]

    def insert(self, tokens: list[int], kv: KVBuffer) -> None:
        """Keep a copy of ``kv`` (whose ``length`` equals ``len(tokens)``)."""
        if not tokens or kv.length != len(tokens):
            return
        for key, (cached, _) in list(self._entries.items()):
            n = _common_prefix(cached, tokens)
            if n == len(tokens):  # already covered by a longer or equal entry
                self._entries.move_to_end(key)
                return
            if n == len(cached):
                self._drop(key)
        entry = kv.trimmed()
        if entry.nbytes() > self.capacity_bytes:
            return
        self._entries[self._next] = (list(tokens), entry)
        self._next += 1
        self.nbytes += entry.nbytes()
        while self.nbytes > self.capacity_bytes:
            self._drop(next(iter(self._entries)))

    def _drop(self, key: int) -> None:
        _, kv = self._entries.pop(key)
        self.nbytes -= kv.nbytes()
