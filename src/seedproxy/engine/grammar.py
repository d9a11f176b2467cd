"""Grammar-constrained decoding (``regex``, ``json_schema``, ``ebnf``, ``structural_tag``)
with llguidance.

llguidance is one of SGLang's grammar backends (``--grammar-backend llguidance``); this
module follows that backend: JSON schemas go through ``grammar_from_json_schema``, regexes
through ``grammar_from("regex")``, and EBNF (GBNF, as SGLang's users write it) through
``grammar_from("ebnf")``. Schemas (``json_schema`` and a structural tag's) first get the
types xgrammar, SGLang's default backend, infers (``schema_types``), so SGLang's
named-tool schema forces an object there as it does on SGLang.

Invariants:
- A grammar is compiled and validated before the request is queued: an invalid one is a
  400 naming its field, and so is one whose matcher is in error at the start (llguidance
  ran out of lexer fuel building it or computing the first mask), so the decode loop
  never meets a grammar that could only end the sequence at once.
- The first mask is computed once per request, at compile time; every choice's matcher
  is a copy of the compiled one and starts from that mask.
- The mask is a pure function of the tokens consumed so far, and disallowed tokens get
  ``-inf`` before the seeded Gumbel argmax, so a constrained request stays deterministic.
- Once the grammar is complete (or could not continue) only the end-of-sequence tokens are
  allowed, so the sequence ends with EOS as in SGLang.
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
from .struct_lark import format_grammar
from .struct_legacy import legacy_grammar

__all__ = ["CompiledGrammar", "GrammarCompiler", "GrammarProcessor"]

_ERROR_CHARS = 500
"""The most of llguidance's error text a refusal quotes."""


@dataclass(frozen=True)
class CompiledGrammar:
    """A request's grammar, checked: a matcher at the start (never advanced itself, only
    copied) and the logit bias it allows first."""

    start: Any
    first: bytes


class GrammarCompiler:
    """Turns a request's grammar field into llguidance matchers for one model's tokenizer.

    The llguidance tokenizer (about a second to build) is made on first use and shared;
    building it is guarded by a lock, so it is safe from any thread.
    """

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
        """Validate ``source`` and return its matcher at the start, first mask computed.

        Raises ``RequestError`` (400, ``param=field``) when the grammar does not compile
        or its matcher is in error before the first token.
        """
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
    """A structural tag as llguidance's grammar. xgrammar's form (``{"type":
    "structural_tag", "format": {...}}``) is read by ``struct_format`` and written by
    ``struct_lark``; the legacy form (``{"structures": [...], "triggers": [...]}``) is
    written by ``struct_legacy``. Any shape neither can read is a ``ValueError`` (the
    caller's 400)."""
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
    """The per-sequence ``LogitsProcessor`` for one grammar. ``first``: the logit bias
    ``matcher`` allows before any token (computed once, at compile time)."""

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
