"""Grammar-constrained decoding (``regex``, ``json_schema``, ``ebnf``, ``structural_tag``)
with llguidance, as SGLang's llguidance backend: JSON schemas through
``grammar_from_json_schema`` (first given the types xgrammar, SGLang's default backend,
infers: ``schema_types``), regexes through ``grammar_from("regex")``, EBNF (GBNF) through
``grammar_from("ebnf")``.

Invariants:
- A grammar is compiled and validated before the request is queued: an invalid one is a
  400 naming its field, and so is one whose matcher is in error at the start (out of
  lexer fuel), so the decode loop never meets a grammar that could only end at once.
- The first mask is computed once per request, at compile time; every choice's matcher
  is a copy of the compiled one.
- The mask is a pure function of the tokens consumed so far, applied as ``-inf`` before
  the seeded Gumbel argmax, so a constrained request stays deterministic.
- Once the grammar is complete (or could not continue) only the end-of-sequence tokens are
  allowed, as in SGLang.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .errors import RequestError
from .schema_types import with_inferred_types
from .struct_format import read_format
from .struct_lark import format_grammar, legacy_grammar

__all__ = ["CompiledGrammar", "GrammarCompiler", "GrammarProcessor"]

_ERROR_CHARS = 500  # the most of llguidance's error text a refusal quotes


@dataclass(frozen=True)
class CompiledGrammar:
    """A checked grammar: its matcher at the start (only ever copied) and its first mask."""

    start: Any
    first: bytes


class GrammarCompiler:
    """Turns a request's grammar field into llguidance matchers for one model's tokenizer,
    whose llguidance tokenizer is built on first use, under a lock (any thread may ask)."""

    def __init__(self, tokenizer: Any, vocab_size: int, eos_token_ids: frozenset[int]) -> None:
        self._hf = tokenizer
        self.vocab_size = vocab_size
        self.eos_token_ids = eos_token_ids
        self._ll: Any = None
        self._lock = threading.Lock()

    def _tokenizer(self) -> Any:
        with self._lock:
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
            raise RequestError(f"Invalid {field}: {_clip(start.get_error())}", param=field)
        return CompiledGrammar(start, first)

    def processor(self, grammar: CompiledGrammar) -> GrammarProcessor:
        """A fresh matcher (one per sequence): a copy of the compiled one."""
        return GrammarProcessor(grammar.start.deep_copy(), self.eos_token_ids, grammar.first)


def _clip(error: str) -> str:
    error = error.strip()
    return error if len(error) <= _ERROR_CHARS else error[:_ERROR_CHARS] + "..."


def _typed(source: str) -> str:
    """``source`` with xgrammar's inferred types; text that is not a JSON object is left
    for llguidance to refuse or read."""
    try:
        schema = json.loads(source)
    except (RecursionError, ValueError):
        return source
    if not isinstance(schema, dict):
        return source
    try:
        return json.dumps(with_inferred_types(schema))
    except RecursionError:
        return source


def _struct_tag_grammar(source: str, special_id: Callable[[str], int | None]) -> str:
    """A structural tag as llguidance's grammar: xgrammar's form (``format``) through
    ``struct_format`` and ``struct_lark``, the legacy one (``structures``, ``triggers``)
    through ``struct_lark.legacy_grammar``; ``ValueError`` otherwise (the caller's 400)."""
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
