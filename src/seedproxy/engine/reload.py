"""New weights for a running engine: what SGLang's ``/update_weights_from_disk`` loads.

Invariants:
- ``prepare_update`` reads and checks everything before the engine is touched: the
  architecture, every shape and every config fact the forward pass uses must equal the
  running model's, else ``EngineError`` naming the first difference. The running weights
  are never modified.
- The new weights' runner (and its row-invariance probe) is built here, off the worker
  thread; the swap itself (``Worker.load_weights``) is a pointer change.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .arch import read_config
from .errors import EngineError
from .llama import BatchRunner, LlamaWeights
from .model import EngineModel, read_weights

__all__ = ["LOAD_FORMATS", "PreparedWeights", "prepare_update", "weight_facts"]

LOAD_FORMATS = ("auto", "safetensors")  # None means auto, as SGLang's default


@dataclass(frozen=True)
class PreparedWeights:
    """Weights read, checked and probed, ready for ``Worker.load_weights``."""

    weights: LlamaWeights
    runner: BatchRunner


def weight_facts(w: LlamaWeights) -> dict[str, Any]:
    """What must not change under a running engine: every shape, every config fact."""
    facts: dict[str, Any] = {
        "layers": len(w.layers), "num_attention_heads": w.num_heads,
        "num_key_value_heads": w.num_kv_heads, "head_dim": w.head_dim,
        "intermediate_size": w.intermediate, "rms_norm_eps": w.rms_eps,
        "rope_scaling": w.rope_scaling, "max_position_embeddings": w.max_positions,
        "sliding_window": w.sliding_window, "rope inverse frequencies": w.inv_freq.tolist(),
        "embed_tokens": tuple(w.embed.shape), "norm": tuple(w.final_norm.shape),
        "lm_head": (w.lm_head.out_features, w.lm_head.in_features),
    }
    for i, layer in enumerate(w.layers):
        for name in ("qkv", "o", "gate_up", "down"):
            lin = getattr(layer, name)
            facts[f"layer {i} {name}"] = (lin.out_features, lin.in_features,
                                          "bias" if lin.bias is not None else "no bias")
        for name in ("input_norm", "post_norm", "q_norm", "k_norm"):
            norm: torch.Tensor | None = getattr(layer, name)
            facts[f"layer {i} {name}"] = None if norm is None else tuple(norm.shape)
    return facts


def _first_difference(old: dict[str, Any], new: dict[str, Any]) -> str | None:
    for key, value in old.items():
        if new.get(key) != value:
            shown = "different values" if key.startswith("rope inverse") else \
                f"{new.get(key)!r}, the running model has {value!r}"
            return f"{key}: {shown}"
    return None


def prepare_update(model_path: str, load_format: str | None, model: EngineModel,
                   max_rows: int) -> PreparedWeights:
    """Read ``model_path`` (a Hugging Face folder) for ``model``, in a thread of its own
    (seconds of I/O and CPU)."""
    if load_format is not None and load_format not in LOAD_FORMATS:
        raise EngineError(f"load_format {load_format!r} is not supported by the engine "
                          f"(supported: {', '.join(LOAD_FORMATS)})")
    folder = Path(model_path).expanduser()
    if not (folder / "config.json").is_file():
        raise EngineError(f"not a Hugging Face model folder (no config.json): {model_path}")
    if load_format == "safetensors" and not any(folder.glob("*.safetensors")):
        raise EngineError(f"no .safetensors file in {model_path} (load_format safetensors)")
    arch = read_config(folder, model_path)
    if arch != model.arch:
        raise EngineError(f"{model_path} is a {arch.hf_class}; the running model is a "
                          f"{model.arch.hf_class}: weights not loaded")
    weights = read_weights(folder, model_path, arch)
    difference = _first_difference(weight_facts(model.weights), weight_facts(weights))
    if difference is not None:
        raise EngineError(f"{model_path} does not fit the running model ({difference}): "
                          "weights not loaded")
    return PreparedWeights(weights, BatchRunner(weights, max_rows))
