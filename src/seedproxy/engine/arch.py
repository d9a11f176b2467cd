"""Which model architectures the engine computes, decided from metadata alone
(``config.json``, or a GGUF's ``general.architecture``) before any weight is read, with one
line naming the model and the supported list.

Invariant: a supported config has no feature the forward pass would silently ignore (MLP
biases, per-layer sliding windows, length-dependent RoPE are refused).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import EngineError

__all__ = ["SUPPORTED", "Architecture", "check_config", "check_gguf", "gguf_architecture"]


@dataclass(frozen=True)
class Architecture:
    """``model_type`` as in ``config.json`` and the transformers class that implements it."""

    model_type: str
    hf_class: str


SUPPORTED: dict[str, Architecture] = {
    a.model_type: a for a in (
        Architecture("llama", "LlamaForCausalLM"),
        Architecture("mistral", "MistralForCausalLM"),
        Architecture("qwen2", "Qwen2ForCausalLM"),
        Architecture("qwen3", "Qwen3ForCausalLM"),
    )
}

_SUPPORTED_LIST = ", ".join(sorted(SUPPORTED))
_UNSUPPORTED_ROPE = frozenset({"dynamic", "longrope"})


def _refuse(source: str, what: str) -> EngineError:
    return EngineError(f"unsupported architecture {what} in {source} "
                       f"(the engine supports: {_SUPPORTED_LIST})")


def check_config(cfg: dict[str, Any], source: str) -> Architecture:
    """The architecture of a ``config.json`` dict, or ``EngineError``."""
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
        if kind in _UNSUPPORTED_ROPE:
            raise _refuse(source, f"{model_type!r} with rope_type {kind!r}")
    return arch


def read_config(folder: Path, source: str) -> Architecture:
    """Read ``folder/config.json`` and check it."""
    try:
        cfg = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise EngineError(f"cannot read {folder / 'config.json'}: {exc}") from exc
    if not isinstance(cfg, dict):
        raise EngineError(f"{folder / 'config.json'} is not a JSON object")
    return check_config(cfg, source)


def gguf_architecture(path: Path) -> str:
    """The ``general.architecture`` metadata value of a GGUF file (no tensor is read)."""
    from gguf import GGUFReader

    try:
        reader = GGUFReader(str(path), "r")
        field = reader.fields["general.architecture"]
        return bytes(field.parts[field.data[0]]).decode("utf-8")
    except (KeyError, IndexError, ValueError, OSError) as exc:
        raise EngineError(f"cannot read GGUF file {path}: {exc}") from exc


def check_gguf(path: Path) -> Architecture:
    """Refuse a GGUF of an unsupported architecture before it is dequantised."""
    name = gguf_architecture(path)
    arch = SUPPORTED.get(name)
    if arch is None:
        raise _refuse(str(path), repr(name))
    return arch
