"""A tiny random-weight Llama for tests: no download, fast, deterministic.

Invariants: ``tiny_model(seed)`` builds the same weights for the same seed in any process
(a private generator, the global RNG is untouched), and uses SmolLM2's tokenizer and chat
template read from the GGUF on disk (cached after the first use).
"""

from __future__ import annotations

import torch

from .llama import LlamaWeights
from .model import EngineModel, default_gguf_path, gguf_tokenizer_dir

__all__ = ["tiny_model"]


def tiny_model(seed: int = 0) -> EngineModel:
    """A 2-layer, hidden-64 Llama with random weights and SmolLM2's tokenizer."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(str(gguf_tokenizer_dir(default_gguf_path())))
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
        rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config).float().eval()
        with torch.no_grad():
            # Larger logits than the default init, so sampling has some structure.
            model.lm_head.weight.normal_(0.0, 0.5)
    weights = LlamaWeights.from_hf(model, max_positions=config.max_position_embeddings)
    eos = {tok.eos_token_id} if tok.eos_token_id is not None else set()
    return EngineModel(
        name="tiny-random-llama", context_length=config.max_position_embeddings,
        tokenizer=tok, weights=weights, model_path=f"tiny-random-llama:seed={seed}",
        source_dir="", eos_token_ids=frozenset(eos),
    )
