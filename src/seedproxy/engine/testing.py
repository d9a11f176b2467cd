"""Tiny random-weight models for tests: no download, fast, deterministic.

Invariant: ``tiny_hf_model(model_type, seed)`` builds the same weights for the same
arguments in any process (a private seed; the global RNG is untouched).
"""

from __future__ import annotations

from typing import Any

import torch

from .checkpoint import SUPPORTED
from .llama import LlamaWeights
from .model import EngineModel, default_gguf_path, gguf_tokenizer_dir

__all__ = ["engine_model", "tiny_hf_model", "tiny_model", "tiny_tokenizer"]


def tiny_tokenizer() -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(gguf_tokenizer_dir(default_gguf_path())))


def tiny_hf_model(model_type: str = "llama", seed: int = 0, vocab_size: int = 49152,
                  random_norms: bool = False, **overrides: Any) -> Any:
    """A 2-layer, hidden-64 transformers model of ``model_type`` with random weights;
    ``random_norms`` randomises norm weights and biases too (not ones and zeros)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    kw: dict[str, Any] = dict(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        max_position_embeddings=2048, rms_norm_eps=1e-5, tie_word_embeddings=False,
        bos_token_id=1, eos_token_id=2, pad_token_id=2,
    )
    kw.update(overrides)
    config = AutoConfig.for_model(model_type, **kw)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config).float().eval()  # type: ignore[no-untyped-call]
        with torch.no_grad():
            # Larger logits than the default init, so sampling has some structure.
            model.lm_head.weight.normal_(0.0, 0.5)
            for name, p in model.named_parameters():
                if random_norms and name.endswith(("norm.weight", "_proj.bias")):
                    p.normal_(1.0 if name.endswith("weight") else 0.0, 0.2)
    return model


def engine_model(hf: Any, tok: Any, name: str, model_path: str = "") -> EngineModel:
    """An ``EngineModel`` over an in-memory transformers model."""
    cfg = hf.config
    eos = {tok.eos_token_id} if tok.eos_token_id is not None else set()
    return EngineModel(
        name=name, context_length=int(cfg.max_position_embeddings), tokenizer=tok,
        weights=LlamaWeights.from_hf(hf, max_positions=int(cfg.max_position_embeddings)),
        model_path=model_path or name, source_dir="", eos_token_ids=frozenset(eos),
        arch=SUPPORTED[cfg.model_type],
    )


def tiny_model(seed: int = 0, model_type: str = "llama") -> EngineModel:
    """A 2-layer, hidden-64 model with random weights and SmolLM2's tokenizer."""
    tok = tiny_tokenizer()
    hf = tiny_hf_model(model_type, seed, vocab_size=len(tok), bos_token_id=tok.bos_token_id,
                       eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id)
    name = f"tiny-random-{model_type}"
    return engine_model(hf, tok, name, f"{name}:seed={seed}")
