"""Builds each sequence's ``LogitsProcessor`` from its ``SamplingParams``.

Invariants:
- Order, as in SGLang's ``apply_logits_bias``: penalties, then the grammar mask, then
  ``logit_bias``. (``min_new_tokens`` stays in the decode loop.)
- A request with none of these features gets no processor, so its path is unchanged.
- Every choice gets its own processor (grammar matchers are stateful); grammars are
  compiled once per request, before anything is queued, so a bad one is a 400.
"""

from __future__ import annotations

import torch

from .grammar import CompiledGrammar, GrammarCompiler
from .logits import LogitsProcessor
from .params import SamplingParams
from .penalties import LogitBias, Penalties

__all__ = ["Chain", "ProcessorFactory"]


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
