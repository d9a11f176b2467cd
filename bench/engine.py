"""Benchmark the embedded engine: aggregate decode speed of 1, 4 and 8 concurrent rollouts.

Usage: python bench/engine.py [--model PATH] [--tokens 128] [--out bench/engine.json]

A GRPO-style group: one chat prompt, seeds 0..7, temperature 1, ``ignore_eos``, 128 new
tokens each, driven through the worker's own ``Generator`` (no HTTP) with ``max_batch``
8 and no prefix cache (every rollout prefills its prompt). It reports aggregate tokens/s
for 1 rollout at a time (each seed alone, one after another), 4 and 8 concurrent, their
ratio to batch 1, and the memory-bandwidth bound ``B x copy bandwidth / weight bytes``
(one read of the weights per step serves all B rows). Every batched rollout's tokens and
logprobs are checked bitwise against the same seed run alone.

``cpu tok/s`` divides by the process's CPU time instead of wall time: on a machine shared
with other work, run with ``SEEDPROXY_ENGINE_THREADS=1`` and compare that column (time
spent waiting for a core is not counted; memory-bandwidth contention still is).
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


def rollouts(model: Any, prompt: list[int], seeds: list[int], tokens: int, max_batch: int,
             temperature: float = 1.0
             ) -> tuple[float, float, dict[int, tuple[list[int], list[float]]], bool]:
    """Run ``seeds`` together; return wall and CPU seconds, outputs by seed, and whether
    the runner pads."""
    from seedproxy.engine.generator import Generator, GenRequest
    from seedproxy.engine.params import parse_sampling_params

    gen = Generator(model, max_batch=max_batch, cache_mb=0)
    out: dict[int, tuple[list[int], list[float]]] = {}
    with torch.inference_mode():
        t0, c0 = time.perf_counter(), time.process_time()
        for seed in seeds:
            params = parse_sampling_params({"max_new_tokens": tokens, "temperature": temperature,
                                            "sampling_seed": seed, "ignore_eos": True},
                                           model.vocab_size)

            def keep(upd: Any, seed: int = seed) -> None:
                if upd.finish is not None:
                    out[seed] = (upd.output_ids, upd.logprobs)

            gen.add(GenRequest(f"s{seed}", prompt, params, return_logprob=True), keep,
                    lambda: False)
        while gen.running:
            gen.step()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return wall, cpu, out, gen.runner.pad


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default=None)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--out", default="bench/engine.json")
    ap.add_argument("--temperature", type=float, default=1.0,
                    help="0: greedy (no Gumbel noise to hash: shows the forward pass alone)")
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
    rollouts(model, prompt, [0], 8, 8)  # warm-up

    alone: dict[int, tuple[list[int], list[float]]] = {}
    wall1 = cpu1 = 0.0
    for seed in range(8):
        wall, cpu, out, padded = rollouts(model, prompt, [seed], args.tokens, 8,
                                          args.temperature)
        wall1, cpu1 = wall1 + wall, cpu1 + cpu
        alone.update(out)
    rates = {1: 8 * args.tokens / wall1}
    cpu_rates = {1: 8 * args.tokens / cpu1}
    exact = {}
    for n in (4, 8):
        wall, cpu, out, _ = rollouts(model, prompt, list(range(n)), args.tokens, 8,
                                     args.temperature)
        rates[n] = n * args.tokens / wall
        cpu_rates[n] = n * args.tokens / cpu
        exact[n] = all(out[s] == alone[s] for s in range(n))
    kernel = model.weights.lm_head.kernel + (", padded to 8 rows" if padded else ", unpadded")
    res = {
        "model": model.name, "weights": "float32", "threads": threads, "kernel": kernel,
        "new_tokens": args.tokens, "temperature": args.temperature,
        "prompt_tokens": len(prompt), "weight_bytes": nbytes,
        "copy_bandwidth_gbs": bw / 1e9,
        "rows": [{"concurrent": n, "tok_s": rates[n], "vs_batch1": rates[n] / rates[1],
                  "bound_tok_s": n * bw / nbytes, "cpu_tok_s": cpu_rates[n],
                  "cpu_vs_batch1": cpu_rates[n] / cpu_rates[1],
                  "bitwise_equal_to_batch1": exact.get(n, True)} for n in (1, 4, 8)],
    }
    print(f"{model.name}: {nbytes / 1e6:.0f} MB float32 weights, copy bandwidth "
          f"{bw / 1e9:.1f} GB/s, {threads} threads, {kernel}, {args.tokens} new tokens "
          f"per rollout, temperature {args.temperature}, prompt {len(prompt)} tokens "
          "(prefill included)")
    print(f"{'concurrent':>10}{'tok/s':>9}{'vs 1':>7}{'bound':>9}{'of bound':>10}"
          f"{'cpu tok/s':>11}{'vs 1':>7}  bitwise")
    for row in res["rows"]:
        print(f"{row['concurrent']:>10}{row['tok_s']:9.1f}{row['vs_batch1']:7.2f}"
              f"{row['bound_tok_s']:9.1f}{row['tok_s'] / row['bound_tok_s']:10.0%}"
              f"{row['cpu_tok_s']:11.1f}{row['cpu_vs_batch1']:7.2f}  "
              f"{row['bitwise_equal_to_batch1']}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
