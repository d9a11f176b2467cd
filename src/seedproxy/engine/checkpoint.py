"""Reading a Hugging Face model folder's safetensors straight into ``LlamaWeights``.

Invariants:
- The weights are memory-mapped (``safetensors.safe_open``): a tensor needing no fusing
  stays a view of the file; fused projections are copied once, when packed.
- The result is bit-identical to ``LlamaWeights.from_hf`` over the same folder loaded by
  transformers in float32 (the same ``.float()`` casts, RoPE by transformers' formula).
- ``read_checkpoint`` returns ``None`` (load through transformers) for a folder without
  safetensors or whose tensor names are not the Llama family's.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from .arch import Architecture
from .llama import LlamaWeights

__all__ = ["read_checkpoint", "read_hf_config", "rope_frequencies", "safetensor_files"]


def safetensor_files(folder: Path) -> list[Path] | None:
    """The folder's safetensors files (one, or the shards its index names), else None."""
    single = folder / "model.safetensors"
    if single.is_file():
        return [single]
    index = folder / "model.safetensors.index.json"
    if not index.is_file():
        return None
    weight_map = json.loads(index.read_text()).get("weight_map", {})
    return [folder / name for name in sorted(set(weight_map.values()))]


def rope_frequencies(cfg: Any) -> tuple[torch.Tensor, float]:
    """``(inv_freq, attention_scaling)`` as the model's rotary embedding computes them."""
    params = getattr(cfg, "rope_parameters", None) or {}
    kind = params.get("rope_type", "default")
    if kind == "default":
        # transformers' compute_default_rope_parameters for Llama, Mistral, Qwen2, Qwen3.
        base = params["rope_theta"]
        dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim)), 1.0
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    inv_freq, scaling = ROPE_INIT_FUNCTIONS[kind](cfg)
    return inv_freq, float(scaling)


_EXPLICIT = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
             "head_dim", "intermediate_size", "rms_norm_eps", "max_position_embeddings",
             "tie_word_embeddings", "eos_token_id")  # defaults differ by architecture


def _plain_config(raw: dict[str, Any]) -> SimpleNamespace | None:
    """``config.json`` read as is, when it spells out every field the forward pass uses
    and its RoPE is the default kind; else None (transformers' config class decides)."""
    if any(key not in raw for key in _EXPLICIT):
        return None
    if raw.get("model_type") == "mistral" and "sliding_window" not in raw:
        return None
    rope = raw.get("rope_parameters")
    if rope is None and raw.get("rope_scaling") is None and "rope_theta" in raw:
        rope = {"rope_type": "default", "rope_theta": raw["rope_theta"]}
    if not isinstance(rope, dict) or rope.get("rope_type", rope.get("type")) != "default" \
            or "rope_theta" not in rope or rope.get("partial_rotary_factor", 1.0) != 1.0:
        return None
    return SimpleNamespace(**{**raw, "rope_parameters": rope})


def read_hf_config(folder: Path, arch: Architecture) -> Any:
    """The folder's config: ``config.json`` as is when complete (``_plain_config``), else
    through transformers' config class for the architecture (about 2 s to import)."""
    plain = _plain_config(json.loads((folder / "config.json").read_text()))
    if plain is not None:
        return plain
    import transformers

    config_class = getattr(transformers, arch.hf_class.removesuffix("ForCausalLM") + "Config")
    return config_class.from_pretrained(str(folder))


def read_checkpoint(folder: Path, cfg: Any, max_positions: int) -> LlamaWeights | None:
    """Map the folder's safetensors and build the engine's weights, or None (see above)."""
    from safetensors import safe_open

    files = safetensor_files(folder)
    if files is None:
        return None
    state: dict[str, torch.Tensor] = {}
    for path in files:
        with safe_open(str(path), framework="pt") as handle:
            for key in handle.keys():
                state[key] = handle.get_tensor(key)
    if "model.embed_tokens.weight" not in state or "model.norm.weight" not in state:
        return None
    if "lm_head.weight" not in state and not getattr(cfg, "tie_word_embeddings", False):
        return None
    inv_freq, scaling = rope_frequencies(cfg)
    return LlamaWeights.from_state(state, cfg, inv_freq=inv_freq, rope_scaling=scaling,
                                   max_positions=max_positions)
