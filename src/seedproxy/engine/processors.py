"""Per-sequence logits processing: penalties, the grammar mask and ``logit_bias``, each a
``LogitsProcessor`` built from a sequence's ``SamplingParams``.

Invariants:
- A processor belongs to one sequence (one choice) and is driven by the decode loop only:
  ``process`` on that sequence's next-token logits row, then ``accept`` with the token
  drawn. ``process`` is a pure function of the row and the sequence's own history, never
  of other sequences in a batch, so batching cannot change a token.
- Order, as in SGLang's ``apply_logits_bias``: penalties, then the grammar mask, then
  ``logit_bias``. (``min_new_tokens`` stays in the decode loop.)
- A request with none of these features gets no processor, so its path is unchanged.
- Every choice gets its own processor (grammar matchers are stateful); grammars are
  compiled once per request, before anything is queued, so a bad one is a 400.
- Penalties follow SGLang's ``sampling/penaltylib`` over the generated tokens only (the
  prompt does not count), with ``count[t]`` the occurrences of ``t``: ``frequency``
  subtracts ``frequency * count[t]``, ``presence`` subtracts itself where ``count[t] > 0``,
  and there ``repetition`` ``r`` multiplies a negative logit by ``r`` and divides a
  positive one; the additive ones come first. All of it is on the raw logits, before
  temperature.
"""

from __future__ import annotations

from typing import Protocol

import torch

from .grammar import CompiledGrammar, GrammarCompiler
from .params import SamplingParams

__all__ = ["Chain", "LogitBias", "LogitsProcessor", "Penalties", "ProcessorFactory"]


class LogitsProcessor(Protocol):
    """Adjusts one sequence's next-token logits (a 1-D float32 row over the vocabulary)."""

    def process(self, logits: torch.Tensor, output_ids: list[int]) -> torch.Tensor:
        """Return the adjusted row (may modify ``logits`` in place and return it)."""
        ...

    def accept(self, token_id: int) -> None:
        """Advance the processor's state past the token that was drawn."""
        ...


class Penalties:
    """Frequency, presence and repetition penalties for one sequence (stateless: the
    counts are taken from ``output_ids`` at each step)."""

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
        pass


class LogitBias:
    """``logit_bias``: a fixed additive bias per token id (stateless)."""

    def __init__(self, bias: tuple[tuple[int, float], ...]) -> None:
        self._ids = torch.tensor([t for t, _ in bias], dtype=torch.int64)
        self._vals = torch.tensor([b for _, b in bias], dtype=torch.float32)

    def process(self, logits: torch.Tensor, output_ids: list[int]) -> torch.Tensor:
        keep = self._ids < logits.numel()
        return logits.index_add_(0, self._ids[keep], self._vals[keep].to(logits.dtype))

    def accept(self, token_id: int) -> None:
        pass


class Chain:
    """Runs processors in order; each sees the row the previous one returned."""

    def __init__(self, parts: list[LogitsProcessor]) -> None:
        self.parts = parts

    def process(self, logits: torch.Tensor, output_ids: list[int]) -> torch.Tensor:
        for part in self.parts:
            logits = part.process(logits, output_ids)
        return logits

    def accept(self, token_id: int) -> None:
        for part in self.parts:
            part.accept(token_id)


class ProcessorFactory:
    """``compile`` once per request (validation), then ``build`` once per choice."""

    def __init__(self, grammars: GrammarCompiler) -> None:
        self.grammars = grammars

    def compile(self, params: SamplingParams) -> CompiledGrammar | None:
        """The compiled grammar of ``params`` (None without one); a bad one is a 400."""
        if params.grammar is None:
            return None
        return self.grammars.compile(*params.grammar)

    def build(self, params: SamplingParams,
              grammar: CompiledGrammar | None) -> LogitsProcessor | None:
        parts: list[LogitsProcessor] = []
        penalties = Penalties(params.frequency_penalty, params.presence_penalty,
                              params.repetition_penalty)
        if penalties.active:
            parts.append(penalties)
        if grammar is not None:
            parts.append(self.grammars.processor(grammar))
        if params.logit_bias:
            parts.append(LogitBias(params.logit_bias))
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else Chain(parts)
