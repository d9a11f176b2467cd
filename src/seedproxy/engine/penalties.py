"""Penalties and ``logit_bias`` with SGLang's semantics (``sampling/penaltylib``).

For a sequence whose generated tokens so far are ``output_ids`` (the prompt does not count,
as in SGLang), and ``count[t]`` the occurrences of token ``t`` among them:
- ``frequency_penalty``: ``logits[t] -= frequency_penalty * count[t]``;
- ``presence_penalty``: ``logits[t] -= presence_penalty`` where ``count[t] > 0``;
- ``repetition_penalty`` ``r``, where ``count[t] > 0``: ``logits[t] *= r`` if negative,
  else ``logits[t] /= r``;
- ``logit_bias``: ``logits[t] += bias[t]``, applied last, after any grammar mask.
The additive penalties come before the scaling one, as in SGLang's ``apply_logits_bias``.
All of it happens on the raw logits, before temperature, and is a pure function of the
row and ``output_ids``: a penalised request stays deterministic.
"""

from __future__ import annotations

import torch

__all__ = ["LogitBias", "Penalties"]


class Penalties:
    """Frequency, presence and repetition penalties for one sequence."""

    def __init__(self, frequency: float, presence: float, repetition: float) -> None:
        self.frequency = frequency
        self.presence = presence
        self.repetition = repetition

    @property
    def active(self) -> bool:
        return self.frequency != 0.0 or self.presence != 0.0 or self.repetition != 1.0

    def process(self, logits: torch.Tensor, output_ids: list[int]) -> torch.Tensor:
        if not output_ids:
            return logits
        ids = torch.tensor(output_ids, dtype=torch.int64)
        counts = torch.bincount(ids, minlength=logits.numel())[: logits.numel()]
        seen = counts > 0
        if self.frequency != 0.0:
            logits -= self.frequency * counts.to(logits.dtype)
        if self.presence != 0.0:
            logits -= self.presence * seen.to(logits.dtype)
        if self.repetition != 1.0:
            scaled = torch.where(logits < 0, logits * self.repetition, logits / self.repetition)
            logits = torch.where(seen, scaled, logits)
        return logits

    def accept(self, token_id: int) -> None:
        """Stateless: the counts are taken from ``output_ids`` at each step."""


class LogitBias:
    """``logit_bias``: a fixed additive bias per token id."""

    def __init__(self, bias: tuple[tuple[int, float], ...]) -> None:
        self._ids = torch.tensor([t for t, _ in bias], dtype=torch.int64)
        self._vals = torch.tensor([b for _, b in bias], dtype=torch.float32)

    def process(self, logits: torch.Tensor, output_ids: list[int]) -> torch.Tensor:
        keep = self._ids < logits.numel()
        return logits.index_add_(0, self._ids[keep], self._vals[keep].to(logits.dtype))

    def accept(self, token_id: int) -> None:
        """Stateless."""
