"""Seeded Gumbel-max sampling, like SGLang's deterministic mode.

Invariants:
- Column ``c``'s noise is ``-log(-log(u))``, ``u = (hash32(seed, position, c) + 0.5) /
  2**32``: a pure function of (seed, position, column) in int64 torch ops, whatever the
  batch, the thread count or the process.
- ``position`` is the token's absolute index in the sequence, so a request resubmitted
  with its generated prefix draws the same noise further on.
- The token is ``argmax(logprobs + noise)`` in float64 over the columns surviving top-k,
  top-p and min-p; greedy takes ``argmax(logits)`` and ignores the seed.
- Reported logprobs are SGLang's default (without ``SGLANG_RETURN_ORIGINAL_LOGPROB``):
  ``log_softmax(logits / temperature)`` before truncation (``log_softmax(logits)`` when
  greedy).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

import torch

from .params import SamplingParams

__all__ = ["Choice", "Sampler", "hash32"]

_M32 = 0xFFFFFFFF
_H = TypeVar("_H", int, torch.Tensor)


def _fmix32(h: _H) -> _H:
    h = h ^ (h >> 16)
    h = (h * 0x85EBCA6B) & _M32
    h = h ^ (h >> 13)
    h = (h * 0xC2B2AE35) & _M32
    return h ^ (h >> 16)


def _base(seed: int, position: int) -> int:
    h = _fmix32((seed & _M32) ^ 0x9E3779B9)
    h = _fmix32(h ^ ((seed >> 32) & _M32))
    return _fmix32((h + (position & _M32) * 0x27D4EB2F) & _M32)


def hash32(seed: int, position: int, columns: torch.Tensor) -> torch.Tensor:
    """murmur3-style 32-bit hash of (seed, position, column) for int64 ``columns``."""
    h = _fmix32(((columns * 0xCC9E2D51) & _M32) ^ _base(seed, position))
    return _fmix32((h + 0x1B873593) & _M32)


@dataclass(frozen=True)
class Choice:
    """A sampled token, its logprob and the full logprob row it was reported from."""

    token_id: int
    logprob: float
    logprobs: torch.Tensor


class Sampler:
    """Per-vocabulary precomputations; ``choose`` is a pure function of its inputs."""

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size
        self._columns = torch.arange(vocab_size, dtype=torch.int64)

    def gumbel(self, seed: int, position: int) -> torch.Tensor:
        """Float64 Gumbel noise for every column at ``position``."""
        u = (hash32(seed, position, self._columns).double() + 0.5) * (1.0 / 2**32)
        return -torch.log(-torch.log(u))

    def choose(self, logits: torch.Tensor, params: SamplingParams, position: int,
               banned: torch.Tensor | None = None) -> Choice:
        """The next token from float32 ``logits`` [vocab] at ``position``; ``banned`` (a bool
        mask) removes columns before anything else (``min_new_tokens``)."""
        logits = logits[: self.vocab_size]
        if banned is not None:
            logits = logits.masked_fill(banned, float("-inf"))
        if params.temperature < 1e-5:
            logprobs = torch.log_softmax(logits, dim=-1)
            token = int(torch.argmax(logits))
            return Choice(token, float(logprobs[token]), logprobs)
        logprobs = torch.log_softmax(logits / params.temperature, dim=-1)
        scores = logprobs.double()
        if params.top_k > 0 and params.top_k < self.vocab_size:
            kth = torch.topk(scores, params.top_k).values[-1]
            scores = scores.masked_fill(scores < kth, float("-inf"))
        if params.top_p < 1.0:
            probs = torch.softmax(scores, dim=-1)
            sorted_probs, order = torch.sort(probs, descending=True, stable=True)
            before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
            drop_sorted = before > params.top_p
            drop = torch.zeros_like(drop_sorted).scatter(0, order, drop_sorted)
            scores = scores.masked_fill(drop, float("-inf"))
        if params.min_p > 0.0:
            probs = torch.softmax(scores, dim=-1)
            scores = scores.masked_fill(probs < params.min_p * probs.max(), float("-inf"))
        if params.top_k == 1:
            token = int(torch.argmax(scores))
        else:
            token = int(torch.argmax(scores + self.gumbel(params.seed, position)))
        return Choice(token, float(logprobs[token]), logprobs)
