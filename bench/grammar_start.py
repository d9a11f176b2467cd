"""What a constrained request costs the engine from its grammar's compile to each choice's
first mask, against a matcher built per choice, in the same run.

The engine checks a grammar by building one matcher and computing its first mask at
compile time (a matcher in error there, such as one out of llguidance's lexer fuel, is a
400); each choice copies that matcher and starts from that mask. The baseline validates
the same grammar, then builds a matcher per choice and computes its first mask. Both
build the same processor and mask one row per choice; their first masks are checked
equal.

    python bench/grammar_start.py [--n 1 8] [--rounds 30]

Each figure is the fastest of ``--rounds`` (the least disturbed by other load).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

import torch

from seedproxy.engine.grammar import GrammarCompiler, GrammarProcessor
from seedproxy.engine.schema_types import with_inferred_types
from seedproxy.engine.testing import tiny_tokenizer

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 6},
                   "age": {"type": "integer", "minimum": 0, "maximum": 120},
                   "pet": {"enum": ["cat", "dog"]}},
    "required": ["name", "age", "pet"], "additionalProperties": False,
}
CASES = {"json_schema": json.dumps(SCHEMA), "regex": "[0-9]{3}-[a-z]{2,5}",
         "ebnf": 'root ::= "yes" | "no" | "maybe"'}


def grammar_text(field: str, source: str) -> str:
    from llguidance import LLMatcher, grammar_from

    if field == "json_schema":
        return str(LLMatcher.grammar_from_json_schema(
            json.dumps(with_inferred_types(json.loads(source)))))
    return str(grammar_from("ebnf" if field == "ebnf" else "regex", source))


def per_choice(compiler: GrammarCompiler, field: str, source: str,
               n: int) -> list[torch.Tensor]:
    """The baseline: validate, then a new matcher and its first mask for every choice."""
    from llguidance import LLMatcher

    ll = compiler._tokenizer()
    grammar = grammar_text(field, source)
    assert not LLMatcher.validate_grammar(grammar, ll)
    rows = []
    for _ in range(n):
        matcher = LLMatcher(ll, grammar, log_level=0)
        proc = GrammarProcessor(matcher, compiler.eos_token_ids, matcher.compute_logit_bias())
        rows.append(proc.process(torch.zeros(compiler.vocab_size), []))
    return rows


def checked(compiler: GrammarCompiler, field: str, source: str,
            n: int) -> list[torch.Tensor]:
    """The engine's path: ``compile`` (with its start check), then a copy per choice."""
    grammar = compiler.compile(field, source)
    return [compiler.processor(grammar).process(torch.zeros(compiler.vocab_size), [])
            for _ in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    tok = tiny_tokenizer()
    compiler = GrammarCompiler(tok, len(tok), frozenset({tok.eos_token_id}))
    compiler.warm().join()
    paths: dict[str, Callable[..., list[torch.Tensor]]] = {
        "per_choice": per_choice, "checked": checked}
    for field, source in CASES.items():
        base, ours = per_choice(compiler, field, source, 1), checked(compiler, field, source, 1)
        assert torch.equal(base[0], ours[0]), f"{field}: the first masks differ"
        for n in args.n:
            times: dict[str, list[float]] = {name: [] for name in paths}
            for _ in range(args.rounds):  # interleaved, so drifting load hits both alike
                for name, path in paths.items():
                    started = time.perf_counter()
                    path(compiler, field, source, n)
                    times[name].append(time.perf_counter() - started)
            b, c = min(times["per_choice"]), min(times["checked"])
            print(f"{field} n={n}: matcher per choice {b * 1e3:.2f} ms, checked and copied "
                  f"{c * 1e3:.2f} ms (x{c / b:.2f})")


if __name__ == "__main__":
    main()
