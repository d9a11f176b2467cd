"""Where a decode step's time goes: the embedded engine at batch B (default 8).

Usage: python bench/engine_profile.py [--rows 8] [--tokens 48] [--temperature 1.0]

Runs one GRPO-style group (seeds 0..B-1, one prompt, ``ignore_eos``) through
``Generator.step`` after the prompt is prefilled, and prints per-step milliseconds by
part, timed with ``perf_counter`` around the forward call, its matrix products and its
attention calls (everything after the forward is sampling and bookkeeping); then the
top operators by self time from a second, ``torch.profiler`` pass (which inflates small
operators: use it for ranking, the first table for figures).
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default=None)
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--temperature", type=float, default=1.0)
    args = ap.parse_args()

    from seedproxy.engine.generator import Generator, GenRequest
    from seedproxy.engine.linear import RowLinear
    from seedproxy.engine.model import load_model
    from seedproxy.engine.params import parse_sampling_params
    from seedproxy.engine.worker import default_threads

    torch.set_num_threads(default_threads())
    model = load_model(args.model)
    tok = model.tokenizer
    text = tok.apply_chat_template([{"role": "user", "content": "Write a poem about the sea."}],
                                   add_generation_prompt=True, tokenize=False)
    prompt = list(tok.encode(text, add_special_tokens=False))
    gen = Generator(model, max_batch=8, cache_mb=0)
    spent: dict[str, float] = defaultdict(float)

    def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*a: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            out = fn(*a, **kw)
            spent[name] += time.perf_counter() - t0
            return out
        return call

    gen.runner.forward = timed("forward", gen.runner.forward)  # type: ignore[method-assign]
    RowLinear.__call__ = timed("matmuls", RowLinear.__call__)  # type: ignore[method-assign]
    sdpa = F.scaled_dot_product_attention
    with torch.inference_mode():
        for seed in range(args.rows):
            params = parse_sampling_params(
                {"max_new_tokens": 2 * args.tokens + 64, "temperature": args.temperature,
                 "sampling_seed": seed, "ignore_eos": True}, model.vocab_size)
            gen.add(GenRequest(f"s{seed}", prompt, params, return_logprob=True),
                    lambda u: None, lambda: False)
        while any(s.pending > 1 for s in gen.running):
            gen.step()
        for _ in range(4):
            gen.step()
        spent.clear()
        F.scaled_dot_product_attention = timed("attention", sdpa)  # type: ignore[assignment]
        t0 = time.perf_counter()
        try:
            for _ in range(args.tokens):
                gen.step()
        finally:
            F.scaled_dot_product_attention = sdpa  # type: ignore[assignment]
        wall = time.perf_counter() - t0
        timings = dict(spent)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(args.tokens // 4):
                gen.step()
    n = args.tokens
    ms = {k: v / n * 1e3 for k, v in timings.items()}
    step, fwd = wall / n * 1e3, ms["forward"]
    print(f"{args.rows} rows, temperature {args.temperature}, {n} steps, "
          f"{torch.get_num_threads()} threads, prompt {len(prompt)} tokens")
    print(f"  step             {step:7.2f} ms")
    print(f"  forward          {fwd:7.2f} ms  (matmuls {ms['matmuls']:.2f}, attention "
          f"{ms['attention']:.2f}, other {fwd - ms['matmuls'] - ms['attention']:.2f})")
    print(f"  after forward    {step - fwd:7.2f} ms  (sampling, logprobs, bookkeeping)")
    print("top operators by self time (profiled, ms/step):")
    events = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
    for ev in events[:14]:
        print(f"  {ev.key:50s} {ev.self_cpu_time_total / 1e3 / (n // 4):7.3f}")

if __name__ == "__main__":
    main()
