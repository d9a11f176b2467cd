"""What xgrammar's structural-tag ``format`` form costs the engine against the legacy
form, for the same tool tags, in the same run: the grammar's compile time (checked
against SmolLM2's tokenizer, as a request's is) and the time per token of the mask along
one answer that calls a tool between free text.

``--tools`` tags ``<function=fK>`` + a JSON schema + ``</function>``, trigger
``<function=``; the legacy form is SGLang's ``structures``/``triggers``, the format form
``triggered_tags`` (what xgrammar's ``from_legacy_structural_tag`` makes of it).

    python bench/struct_tag.py [--tools 1 8 32] [--rounds 9]

Each figure is the fastest of ``--rounds`` (the least disturbed by other load).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import torch

from seedproxy.engine.grammar import CompiledGrammar, GrammarCompiler
from seedproxy.engine.testing import tiny_tokenizer


def schema(k: int) -> dict[str, Any]:
    return {"type": "object", "properties": {f"arg{k}": {"type": "integer"},
                                             "note": {"type": "string"}},
            "required": [f"arg{k}"], "additionalProperties": False}


def legacy(n: int) -> str:
    return json.dumps({"triggers": ["<function="], "structures": [
        {"begin": f"<function=f{k}>", "schema": schema(k), "end": "</function>"}
        for k in range(n)]})


def formatted(n: int) -> str:
    return json.dumps({"type": "structural_tag", "format": {
        "type": "triggered_tags", "triggers": ["<function="], "tags": [
            {"type": "tag", "begin": f"<function=f{k}>",
             "content": {"type": "json_schema", "json_schema": schema(k)},
             "end": "</function>"} for k in range(n)]}})


def walk(compiler: GrammarCompiler, grammar: CompiledGrammar, ids: list[int]) -> float:
    """Seconds per token: the mask, then the token, along ``ids`` (each allowed, and
    the end of sequence allowed after the last)."""
    proc = compiler.processor(grammar)
    started = time.perf_counter()
    for k, token in enumerate(ids):
        logits = proc.process(torch.zeros(compiler.vocab_size), ids[:k])
        assert logits[token] == 0, f"token {k} of the answer is masked"
        proc.accept(token)
    elapsed = time.perf_counter() - started
    last = proc.process(torch.zeros(compiler.vocab_size), ids)
    assert all(last[e] == 0 for e in compiler.eos_token_ids), "the answer cannot end there"
    return elapsed / len(ids)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tools", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    tok = tiny_tokenizer()
    compiler = GrammarCompiler(tok, len(tok), frozenset({tok.eos_token_id}))
    compiler.warm().join()
    for n in args.tools:
        answer = (f"Let me look that up. <function=f{n - 1}>{{\"arg{n - 1}\": 42, "
                  "\"note\": \"twice\"}</function> Done.")
        ids = tok.encode(answer, add_special_tokens=False)
        sources = {"legacy": legacy(n), "format": formatted(n)}
        compiles: dict[str, list[float]] = {name: [] for name in sources}
        masks: dict[str, list[float]] = {name: [] for name in sources}
        for _ in range(args.rounds):  # interleaved, so drifting load hits both alike
            for name, source in sources.items():
                started = time.perf_counter()
                grammar = compiler.compile("structural_tag", source)
                compiles[name].append(time.perf_counter() - started)
                masks[name].append(walk(compiler, grammar, ids))
        rows = {name: (min(compiles[name]), min(masks[name])) for name in sources}
        (lc, lm), (fc, fm) = rows["legacy"], rows["format"]
        print(f"tools={n}: compile legacy {lc * 1e3:.2f} ms, format {fc * 1e3:.2f} ms "
              f"(x{fc / lc:.2f}); mask per token legacy {lm * 1e6:.0f} us, format "
              f"{fm * 1e6:.0f} us (x{fm / lm:.2f}) over {len(ids)} tokens")


if __name__ == "__main__":
    main()
