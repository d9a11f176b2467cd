"""A minimal Llama forward pass over loaded weights, one token at a time.

Invariants:
- Every token, whether it belongs to the prompt or was generated, goes through the same
  single-token code path (``LlamaRunner.step``) with the same tensor shapes for a given
  position. The logits at position ``p`` therefore depend only on the token ids at
  positions ``0..p``, bit for bit, on a given machine, torch build and thread count: a
  prompt resubmitted with its generated prefix reproduces the original run exactly.
- All maths is float32; matmuls are ``[1, k] x [k, n]`` GEMVs, which are memory-bound, so
  one token costs about one read of the weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

__all__ = ["LayerWeights", "LlamaRunner", "LlamaWeights"]


@dataclass(frozen=True)
class LayerWeights:
    """One decoder layer; ``qkv`` and ``gate_up`` are row-concatenated projections."""

    input_norm: torch.Tensor
    qkv: torch.Tensor
    o: torch.Tensor
    post_norm: torch.Tensor
    gate_up: torch.Tensor
    down: torch.Tensor


@dataclass(frozen=True)
class LlamaWeights:
    """All float32 weights plus the shape facts the forward pass needs."""

    embed: torch.Tensor
    layers: tuple[LayerWeights, ...]
    final_norm: torch.Tensor
    lm_head: torch.Tensor
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate: int
    rms_eps: float
    inv_freq: torch.Tensor
    rope_scaling: float
    max_positions: int

    @property
    def vocab_size(self) -> int:
        return int(self.lm_head.shape[0])

    def nbytes(self) -> int:
        """Bytes read per decoded token (the embedding row read is negligible)."""
        total = self.lm_head.numel() * self.lm_head.element_size()
        total += self.final_norm.numel() * 4
        for layer in self.layers:
            for t in (layer.input_norm, layer.qkv, layer.o, layer.post_norm, layer.gate_up,
                      layer.down):
                total += t.numel() * t.element_size()
        return total

    @classmethod
    def from_hf(cls, model: torch.nn.Module, max_positions: int) -> LlamaWeights:
        """Extract (and fuse) the weights of a transformers Llama-family causal LM."""
        cfg = model.config
        inner = model.model
        layers = []
        for layer in inner.layers:
            att, mlp = layer.self_attn, layer.mlp
            if getattr(att.q_proj, "bias", None) is not None:
                raise ValueError("attention biases are not supported")
            layers.append(LayerWeights(
                input_norm=layer.input_layernorm.weight.detach().float().contiguous(),
                qkv=torch.cat([att.q_proj.weight, att.k_proj.weight, att.v_proj.weight])
                .detach().float().contiguous(),
                o=att.o_proj.weight.detach().float().contiguous(),
                post_norm=layer.post_attention_layernorm.weight.detach().float().contiguous(),
                gate_up=torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])
                .detach().float().contiguous(),
                down=mlp.down_proj.weight.detach().float().contiguous(),
            ))
        rotary = inner.rotary_emb
        num_heads = int(cfg.num_attention_heads)
        head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // num_heads)
        return cls(
            embed=inner.embed_tokens.weight.detach().float().contiguous(),
            layers=tuple(layers),
            final_norm=inner.norm.weight.detach().float().contiguous(),
            lm_head=model.lm_head.weight.detach().float().contiguous(),
            num_heads=num_heads,
            num_kv_heads=int(getattr(cfg, "num_key_value_heads", None) or num_heads),
            head_dim=head_dim,
            intermediate=int(cfg.intermediate_size),
            rms_eps=float(cfg.rms_norm_eps),
            inv_freq=rotary.inv_freq.detach().float().clone(),
            rope_scaling=float(getattr(rotary, "attention_scaling", 1.0)),
            max_positions=max_positions,
        )


class LlamaRunner:
    """A KV cache plus the single-token forward step. Not thread-safe: one owner thread."""

    def __init__(self, weights: LlamaWeights) -> None:
        self.w = weights
        self._capacity = 0
        self._k: list[torch.Tensor] = []
        self._v: list[torch.Tensor] = []
        self._cos = torch.empty(0)
        self._sin = torch.empty(0)
        self._scale = weights.head_dim ** -0.5

    def _ensure(self, length: int) -> None:
        """Grow the cache and the rotary tables to hold ``length`` positions."""
        if length <= self._capacity:
            return
        w = self.w
        cap = min(w.max_positions, max(256, 1 << (length - 1).bit_length()))
        cap = max(cap, length)
        shape = (w.num_kv_heads, cap, w.head_dim)
        new_k = [torch.zeros(shape) for _ in w.layers]
        new_v = [torch.zeros(shape) for _ in w.layers]
        if self._capacity:
            for old, new in zip(self._k + self._v, new_k + new_v, strict=True):
                new[:, : self._capacity].copy_(old)
        self._k, self._v = new_k, new_v
        pos = torch.arange(cap, dtype=torch.float64)
        freqs = torch.outer(pos, w.inv_freq.double())
        emb = torch.cat([freqs, freqs], dim=-1)
        self._cos = (emb.cos() * w.rope_scaling).float()
        self._sin = (emb.sin() * w.rope_scaling).float()
        self._capacity = cap

    def step(self, token_id: int, position: int) -> torch.Tensor:
        """Run token ``token_id`` at ``position``; return float32 logits of shape [vocab].

        The cache must already hold positions ``0..position-1`` (from earlier steps).
        """
        w = self.w
        self._ensure(position + 1)
        nh, nkv, hd = w.num_heads, w.num_kv_heads, w.head_dim
        group = nh // nkv
        q_size = nh * hd
        cos = self._cos[position]
        sin = self._sin[position]
        half = hd // 2
        eps = w.rms_eps
        inter = w.intermediate
        kv_end = q_size + nkv * hd
        x = w.embed[token_id].unsqueeze(0)
        for i, layer in enumerate(w.layers):
            h = x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * layer.input_norm
            qkv = F.linear(h, layer.qkv)[0]
            qk = qkv[:kv_end].view(nh + nkv, hd)
            qk = torch.addcmul(qk * cos, torch.cat([-qk[:, half:], qk[:, :half]], dim=-1), sin)
            kc, vc = self._k[i], self._v[i]
            kc[:, position] = qk[nh:]
            vc[:, position] = qkv[kv_end:].view(nkv, hd)
            att = F.scaled_dot_product_attention(
                qk[:nh].view(1, nkv, group, hd), kc[None, :, : position + 1],
                vc[None, :, : position + 1], scale=self._scale,
            ).reshape(1, q_size)
            x = x + F.linear(att, layer.o)
            h = x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * layer.post_norm
            gu = F.linear(h, layer.gate_up)
            x = x + F.linear(F.silu(gu[:, :inter]) * gu[:, inter:], layer.down)
        x = x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w.final_norm
        return F.linear(x, w.lm_head)[0]
