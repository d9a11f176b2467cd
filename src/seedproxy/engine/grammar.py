"""Per-sequence logits processing: penalties, the grammar mask and ``logit_bias``; grammars
(``regex``, ``json_schema``, ``ebnf``, ``structural_tag``) with llguidance, as SGLang's
llguidance backend (JSON schemas first given the types xgrammar, SGLang's default backend,
infers: ``schema_types``).

Invariants:
- A processor belongs to one sequence (one choice) and is driven by the decode loop only:
  ``process`` on that sequence's next-token logits row, then ``accept`` with the token
  drawn. ``process`` is a pure function of the row and the sequence's own history, so
  batching cannot change a token.
- Order, as in SGLang's ``apply_logits_bias``: penalties, then the grammar mask, then
  ``logit_bias``. (``min_new_tokens`` stays in the decode loop.) A request with none of
  these gets no processor, so its path is unchanged.
- Penalties follow SGLang's ``sampling/penaltylib`` over the generated tokens only, with
  ``count[t]`` the occurrences of ``t``: ``frequency`` subtracts ``frequency * count[t]``,
  ``presence`` subtracts itself where ``count[t] > 0``, and there ``repetition`` ``r``
  multiplies a negative logit by ``r`` and divides a positive one; the additive ones come
  first. All of it is on the raw logits, before temperature.
- A grammar is compiled and validated before the request is queued: an invalid one, or
  one whose matcher is in error at the start (out of lexer fuel), is a 400 naming its
  field, so the decode loop never meets a grammar that could only end at once.
- The first mask is computed once per request; every choice's matcher is a copy.
- The mask is a pure function of the tokens consumed so far, applied as ``-inf`` before
  the seeded Gumbel argmax. Once the grammar is complete (or could not continue) only the
  end-of-sequence tokens are allowed, as in SGLang.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from .errors import RequestError
from .params import SamplingParams
from .schema_types import with_inferred_types
from .struct_format import read_format
from .struct_lark import format_grammar, legacy_grammar

__all__ = ["Chain", "CompiledGrammar", "GrammarCompiler", "GrammarProcessor", "LogitBias",
           "LogitsProcessor", "Penalties", "processor"]


@dataclass(frozen=True)
class CompiledGrammar:
    """A checked grammar: its matcher at the start (only ever copied) and its first mask."""

    start: Any
    first: bytes


class GrammarCompiler:
    """Turns a request's grammar field into llguidance matchers for one model's tokenizer
    (its llguidance tokenizer built on first use)."""

    def __init__(self, tokenizer: Any, vocab_size: int, eos_token_ids: frozenset[int]) -> None:
        self._hf = tokenizer
        self.vocab_size = vocab_size
        self.eos_token_ids = eos_token_ids
        self._ll: Any = None
        self._lock = threading.Lock()

    def _tokenizer(self) -> Any:
        with self._lock:  # any thread may ask
            if self._ll is None:
                from llguidance.hf import from_tokenizer

                eos = sorted(self.eos_token_ids) or None
                self._ll = from_tokenizer(self._hf, n_vocab=self.vocab_size, eos_token=eos)
            return self._ll

    def _special_id(self, text: str) -> int | None:
        """The id of the special token whose text is exactly ``text``, or None."""
        ll = self._tokenizer()
        ids = ll.tokenize_str(text, parse_special=True)
        return ids[0] if len(ids) == 1 and ll.is_special_token(ids[0]) else None

    def warm(self) -> threading.Thread:
        """Build the llguidance tokenizer in a daemon thread, off the event loop."""
        thread = threading.Thread(target=self._tokenizer, name="seedproxy-grammar-warm",
                                  daemon=True)
        thread.start()
        return thread

    def compile(self, field: str, source: str) -> CompiledGrammar:
        """``source`` validated; ``RequestError`` (400, ``param=field``) when it does not
        compile or its matcher is in error before the first token."""
        from llguidance import LLMatcher, grammar_from

        try:
            if field == "json_schema":
                grammar = LLMatcher.grammar_from_json_schema(_typed(source))
            elif field == "structural_tag":
                grammar = _struct_tag_grammar(source, self._special_id)
            else:
                grammar = grammar_from("ebnf" if field == "ebnf" else "regex", source)
        except ValueError as exc:
            raise RequestError(f"Invalid {field}: {exc}", param=field) from exc
        error = LLMatcher.validate_grammar(grammar, self._tokenizer())
        if error:
            raise RequestError(f"Invalid {field}: {error.strip()}", param=field)
        start = LLMatcher(self._tokenizer(), grammar, log_level=0)
        first = start.compute_logit_bias()
        if start.is_error():
            error = start.get_error().strip()  # quoted up to 500 characters
            error = error if len(error) <= 500 else error[:500] + "..."
            raise RequestError(f"Invalid {field}: {error}", param=field)
        return CompiledGrammar(start, first)

    def processor(self, grammar: CompiledGrammar) -> GrammarProcessor:
        """A fresh matcher (one per sequence): a copy of the compiled one."""
        return GrammarProcessor(grammar.start.deep_copy(), self.eos_token_ids, grammar.first)


def _typed(source: str) -> str:
    """``source`` with xgrammar's inferred types (anything but a JSON object as is)."""
    try:
        schema = json.loads(source)
        return json.dumps(with_inferred_types(schema)) if isinstance(schema, dict) else source
    except (RecursionError, ValueError):
        return source


def _struct_tag_grammar(source: str, special_id: Callable[[str], int | None]) -> str:
    """A structural tag (xgrammar's ``format`` form or the legacy one) as llguidance's
    grammar; ``ValueError`` otherwise (the caller's 400)."""
    try:
        tag = json.loads(source)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    except RecursionError:
        raise ValueError("nested too deeply") from None
    if isinstance(tag, dict) and "format" in tag:
        return format_grammar(read_format(tag))
    if not isinstance(tag, dict) or tag.get("structures") is None:
        raise ValueError("needs either format (xgrammar's structural tag) or structures "
                         "and triggers (the legacy form)")
    return legacy_grammar(tag, special_id)


class GrammarProcessor:
    """The per-sequence ``LogitsProcessor`` for one grammar; ``first``: the compiled mask."""

    def __init__(self, matcher: Any, eos_token_ids: frozenset[int], first: bytes) -> None:
        self._m = matcher
        self._eos = sorted(eos_token_ids)
        self._first: bytes | None = first

    def _allowed(self, width: int) -> torch.Tensor:
        allowed = torch.zeros(width, dtype=torch.bool)
        if self._m.is_stopped() or self._m.is_error():
            allowed[[t for t in self._eos if t < width]] = True
            return allowed
        raw = self._first if self._first is not None else self._m.compute_logit_bias()
        bias = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
        n = min(width, bias.numel())
        allowed[:n] = bias[:n] > 0
        return allowed

    def process(self, logits: torch.Tensor, output_ids: list[int]) -> torch.Tensor:
        return logits.masked_fill_(~self._allowed(logits.numel()), float("-inf"))

    def accept(self, token_id: int) -> None:
        self._first = None
        if not self._m.is_stopped():
            self._m.consume_token(token_id)


class LogitsProcessor(Protocol):
    """Adjusts one sequence's next-token logits (a 1-D float32 row over the vocabulary)."""

    def process(self, logits: torch.Tensor, output_ids: list[int]) -> torch.Tensor:
        """Return the adjusted row (may modify ``logits`` in place and return it)."""
        ...

    def accept(self, token_id: int) -> None:
        """Advance the processor's state past the token that was drawn."""
        ...


class _Stateless:
    def accept(self, token_id: int) -> None:
        pass


class Penalties(_Stateless):
    """Frequency, presence and repetition penalties (counted from ``output_ids``)."""

    def __init__(self, frequency: float, presence: float, repetition: float) -> None:
        self.frequency, self.presence, self.repetition = frequency, presence, repetition

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


class LogitBias(_Stateless):
    """``logit_bias``: a fixed additive bias per token id."""

    def __init__(self, bias: tuple[tuple[int, float], ...]) -> None:
        self._ids = torch.tensor([t for t, _ in bias], dtype=torch.int64)
        self._vals = torch.tensor([b for _, b in bias], dtype=torch.float32)

    def process(self, logits: torch.Tensor, output_ids: list[int]) -> torch.Tensor:
        keep = self._ids < logits.numel()
        return logits.index_add_(0, self._ids[keep], self._vals[keep].to(logits.dtype))


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


def processor(params: SamplingParams, grammar: LogitsProcessor | None
              ) -> LogitsProcessor | None:
    """One choice's processor (``grammar``: its own matcher), None without any feature."""
    parts: list[LogitsProcessor] = []
    if (params.frequency_penalty, params.presence_penalty, params.repetition_penalty) != (
            0.0, 0.0, 1.0):
        parts.append(Penalties(params.frequency_penalty, params.presence_penalty,
                               params.repetition_penalty))
    if grammar is not None:
        parts.append(grammar)
    if params.logit_bias:
        parts.append(LogitBias(params.logit_bias))
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else Chain(parts)
