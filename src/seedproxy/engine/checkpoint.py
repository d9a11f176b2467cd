"""A Hugging Face model folder (or a GGUF's metadata) read for the engine: its architecture,
its config, and its safetensors straight into ``LlamaWeights``.

Invariants:
- The architecture is decided from metadata alone (``config.json``, or a GGUF's
  ``general.architecture``) before any weight is read; a supported config has no feature
  the forward pass would silently ignore (MLP biases, per-layer sliding windows,
  length-dependent RoPE are refused).
- The weights are memory-mapped: a tensor needing no fusing stays a view of the file.
- The result is bit-identical to ``LlamaWeights.from_hf`` over the same folder loaded by
  transformers in float32 (the same ``.float()`` casts, RoPE by transformers' formula).
- ``read_checkpoint`` returns ``None`` (load through transformers) for a folder without
  safetensors or whose tensor names are not the Llama family's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from .errors import EngineError
from .llama import LlamaWeights

__all__ = ["SUPPORTED", "Architecture", "check_gguf", "read_checkpoint", "read_config",
           "read_hf_config"]


@dataclass(frozen=True)
class Architecture:
    model_type: str
    hf_class: str


SUPPORTED: dict[str, Architecture] = {
    name: Architecture(name, hf_class) for name, hf_class in (
        ("llama", "LlamaForCausalLM"), ("mistral", "MistralForCausalLM"),
        ("qwen2", "Qwen2ForCausalLM"), ("qwen3", "Qwen3ForCausalLM"))
}


def _refuse(source: str, what: str) -> EngineError:
    return EngineError(f"unsupported architecture {what} in {source} "
                       f"(the engine supports: {', '.join(sorted(SUPPORTED))})")


def read_config(folder: Path, source: str) -> Architecture:
    """The architecture of ``folder/config.json``, or ``EngineError``."""
    try:
        cfg = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise EngineError(f"cannot read {folder / 'config.json'}: {exc}") from exc
    if not isinstance(cfg, dict):
        raise EngineError(f"{folder / 'config.json'} is not a JSON object")
    model_type = cfg.get("model_type")
    arch = SUPPORTED.get(model_type) if isinstance(model_type, str) else None
    if arch is None:
        names = cfg.get("architectures")
        shown = names[0] if isinstance(names, list) and names else None
        raise _refuse(source, repr(model_type if model_type else shown))
    if cfg.get("mlp_bias"):
        raise _refuse(source, f"{model_type!r} with mlp_bias")
    if model_type in ("qwen2", "qwen3") and cfg.get("use_sliding_window"):
        raise _refuse(source, f"{model_type!r} with use_sliding_window")
    rope = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
    if isinstance(rope, dict):
        kind = rope.get("rope_type", rope.get("type"))
        if kind in ("dynamic", "longrope"):
            raise _refuse(source, f"{model_type!r} with rope_type {kind!r}")
    return arch


def check_gguf(path: Path) -> Architecture:
    """A GGUF's architecture (its metadata only), refused before it is dequantised."""
    from gguf import GGUFReader

    try:
        field = GGUFReader(str(path), "r").fields["general.architecture"]
        name = bytes(field.parts[field.data[0]]).decode("utf-8")
    except (KeyError, IndexError, ValueError, OSError) as exc:
        raise EngineError(f"cannot read GGUF file {path}: {exc}") from exc
    arch = SUPPORTED.get(name)
    if arch is None:
        raise _refuse(str(path), repr(name))
    return arch


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
    """``config.json`` as is when it spells out every field the forward pass uses and its
    RoPE is the default kind; else None."""
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
    """The folder's config, through transformers' config class (about 2 s to import) only
    when ``_plain_config`` cannot read it."""
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
            state.update((key, handle.get_tensor(key)) for key in handle.keys())
    if "model.embed_tokens.weight" not in state or "model.norm.weight" not in state:
        return None
    if "lm_head.weight" not in state and not getattr(cfg, "tie_word_embeddings", False):
        return None
    inv_freq, scaling = rope_frequencies(cfg)
    return LlamaWeights.from_state(state, cfg, inv_freq=inv_freq, rope_scaling=scaling,
                                   max_positions=max_positions)
