"""A Llama-family forward pass (Llama, Mistral, Qwen2, Qwen3) over rows of tokens.

Invariants:
- One call runs up to ``max_rows`` rows, each (token, position, its sequence's
  ``KVBuffer``), a sequence's rows at consecutive positions; prompt and generated tokens
  go through the same per-row arithmetic, float32 throughout.
- A row's logits depend only on its sequence's ids at ``0..position``, bit for bit:
  matrix products are row-invariant (``linear.py``: padded to ``max_rows`` unless the
  kernel is invariant to the row count), norms, RoPE and activations are per row, and
  attention is per row over that row's own keys.
- A ``KVBuffer`` is laid out ``[layers, position, kv_heads, head_dim]``, so positions
  ``a..b`` have the same strides whatever the capacity: attention over a copied or
  regrown buffer reads the same numbers in the same order.
- ``PrefixCache`` (finished sequences' prefixes) holds copies, never a sequence's buffer:
  reuse is a bitwise copy. It stays within its byte budget (least recently used go
  first); an entry whose tokens are a prefix of a newer entry's is dropped as redundant.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from .linear import RowLinear, rows_invariant

__all__ = ["BatchRunner", "KVBuffer", "LayerWeights", "LlamaWeights", "PrefixCache"]


class KVBuffer:
    """Keys and values of one sequence; grows by doubling. ``length`` positions are valid."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, capacity: int) -> None:
        self.shape = (layers, kv_heads, head_dim)
        self.k = torch.empty(layers, max(1, capacity), kv_heads, head_dim)
        self.v = torch.empty_like(self.k)
        self.length = 0

    @property
    def capacity(self) -> int:
        return int(self.k.shape[1])

    def nbytes(self) -> int:
        return 2 * self.k.numel() * 4

    def ensure(self, length: int) -> None:
        if length > self.capacity:
            grown = KVBuffer(*self.shape, max(length, 2 * self.capacity))
            grown.copy_prefix(self, self.length)
            self.k, self.v = grown.k, grown.v

    def copy_prefix(self, other: KVBuffer, length: int) -> None:
        """Make positions ``0..length-1`` a bitwise copy of ``other``'s."""
        self.ensure(length)
        self.k[:, :length].copy_(other.k[:, :length])
        self.v[:, :length].copy_(other.v[:, :length])
        self.length = length

    def trimmed(self) -> KVBuffer:
        """A copy holding exactly ``length`` positions (what the cache keeps)."""
        out = KVBuffer(*self.shape, self.length)
        out.copy_prefix(self, self.length)
        return out


def _common_prefix(a: list[int], b: list[int]) -> int:
    pairs = enumerate(zip(a, b, strict=False))
    return next((i for i, (x, y) in pairs if x != y), min(len(a), len(b)))


class PrefixCache:
    """Finished sequences' KV, keyed by their token ids; bounded by ``capacity_bytes``."""

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = max(0, capacity_bytes)
        self._entries: OrderedDict[int, tuple[list[int], KVBuffer]] = OrderedDict()
        self._next = 0
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, tokens: list[int]) -> tuple[int, KVBuffer | None]:
        """The longest cached common prefix with ``tokens`` and the buffer holding it."""
        best, best_key = 0, None
        for key, (cached, _) in self._entries.items():
            n = _common_prefix(cached, tokens)
            if n > best:
                best, best_key = n, key
        if best_key is None:
            return 0, None
        self._entries.move_to_end(best_key)
        return best, self._entries[best_key][1]

    def insert(self, tokens: list[int], kv: KVBuffer) -> None:
        """Keep a copy of ``kv`` (whose ``length`` equals ``len(tokens)``)."""
        if not tokens or kv.length != len(tokens):
            return
        for key, (cached, _) in list(self._entries.items()):
            n = _common_prefix(cached, tokens)
            if n == len(tokens):  # already covered by a longer or equal entry
                self._entries.move_to_end(key)
                return
            if n == len(cached):
                self._drop(key)
        entry = kv.trimmed()
        if entry.nbytes() > self.capacity_bytes:
            return
        self._entries[self._next] = (list(tokens), entry)
        self._next += 1
        self.nbytes += entry.nbytes()
        while self.nbytes > self.capacity_bytes:
            self._drop(next(iter(self._entries)))

    def _drop(self, key: int) -> None:
        _, kv = self._entries.pop(key)
        self.nbytes -= kv.nbytes()


@dataclass(frozen=True)
class LayerWeights:
    """One decoder layer; ``qkv`` and ``gate_up`` are row-concatenated projections."""

    input_norm: torch.Tensor
    qkv: RowLinear
    q_norm: torch.Tensor | None
    k_norm: torch.Tensor | None
    o: RowLinear
    post_norm: torch.Tensor
    gate_up: RowLinear
    down: RowLinear


def _t(p: torch.Tensor) -> torch.Tensor:
    return p.detach().float().contiguous()


@dataclass(frozen=True)
class LlamaWeights:
    """All float32 weights plus the shape facts the forward pass needs."""

    embed: torch.Tensor
    layers: tuple[LayerWeights, ...]
    final_norm: torch.Tensor
    lm_head: RowLinear
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate: int
    rms_eps: float
    inv_freq: torch.Tensor
    rope_scaling: float
    max_positions: int
    sliding_window: int | None = None

    @property
    def vocab_size(self) -> int:
        return self.lm_head.out_features

    def linears(self) -> list[RowLinear]:
        return [self.lm_head] + [lin for layer in self.layers
                                 for lin in (layer.qkv, layer.o, layer.gate_up, layer.down)]

    def nbytes(self) -> int:
        """Bytes read per forward call (the embedding rows read are negligible)."""
        norms = [self.final_norm] + [n for ly in self.layers for n in (ly.input_norm, ly.post_norm)]
        return sum(lin.nbytes() for lin in self.linears()) + sum(n.numel() * 4 for n in norms)

    @classmethod
    def from_hf(cls, model: Any, max_positions: int) -> LlamaWeights:
        """Extract (and fuse) the weights of a transformers Llama-family causal LM."""
        rotary = model.model.rotary_emb
        return cls.from_state(dict(model.state_dict()), model.config,
                              inv_freq=rotary.inv_freq,
                              rope_scaling=float(getattr(rotary, "attention_scaling", 1.0)),
                              max_positions=max_positions)

    @classmethod
    def from_state(cls, state: Mapping[str, torch.Tensor], cfg: Any, *, inv_freq: torch.Tensor,
                   rope_scaling: float, max_positions: int) -> LlamaWeights:
        """Fuse a Llama-family state dict (transformers' tensor names) into the engine's
        weights; ``ValueError`` for a bias the forward pass does not compute."""
        layers = []
        for i in range(int(cfg.num_hidden_layers)):
            pre = f"model.layers.{i}."
            if any(f"{pre}{name}.bias" in state for name in
                   ("self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")):
                raise ValueError("o_proj and MLP biases are not supported")
            att, mlp = pre + "self_attn.", pre + "mlp."
            biases = [state.get(f"{att}{p}_proj.bias") for p in "qkv"]
            if any(b is not None for b in biases) and not all(b is not None for b in biases):
                raise ValueError("biases on some of q/k/v only are not supported")
            q_norm, k_norm = (state.get(f"{att}{p}_norm.weight") for p in "qk")
            layers.append(LayerWeights(
                input_norm=_t(state[pre + "input_layernorm.weight"]),
                qkv=RowLinear(torch.cat([state[f"{att}{p}_proj.weight"] for p in "qkv"]),
                              torch.cat([b for b in biases if b is not None])
                              if biases[0] is not None else None),
                q_norm=None if q_norm is None else _t(q_norm),
                k_norm=None if k_norm is None else _t(k_norm),
                o=RowLinear(state[att + "o_proj.weight"]),
                post_norm=_t(state[pre + "post_attention_layernorm.weight"]),
                gate_up=RowLinear(torch.cat([state[mlp + "gate_proj.weight"],
                                             state[mlp + "up_proj.weight"]])),
                down=RowLinear(state[mlp + "down_proj.weight"]),
            ))
        embed = state["model.embed_tokens.weight"]
        num_heads = int(cfg.num_attention_heads)
        head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // num_heads)
        window = getattr(cfg, "sliding_window", None) if cfg.model_type == "mistral" else None
        return cls(
            embed=_t(embed), layers=tuple(layers), final_norm=_t(state["model.norm.weight"]),
            lm_head=RowLinear(state.get("lm_head.weight", embed)), num_heads=num_heads,
            num_kv_heads=int(getattr(cfg, "num_key_value_heads", None) or num_heads),
            head_dim=head_dim, intermediate=int(cfg.intermediate_size),
            rms_eps=float(cfg.rms_norm_eps), inv_freq=inv_freq.detach().float().clone(),
            rope_scaling=rope_scaling, max_positions=max_positions,
            sliding_window=int(window) if window else None,
        )


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * weight


class BatchRunner:
    """Runs rows through the model. Not thread-safe: one owner thread."""

    def __init__(self, weights: LlamaWeights, max_rows: int, pad: bool | None = None) -> None:
        self.w = weights
        self.max_rows = max(1, max_rows)
        self.pad = (not rows_invariant(weights.linears(), self.max_rows)) if pad is None \
            else pad
        self._scale = weights.head_dim ** -0.5
        self._cos = torch.empty(0, weights.head_dim)
        self._sin = torch.empty(0, weights.head_dim)

    def new_buffer(self, capacity: int) -> KVBuffer:
        w = self.w
        return KVBuffer(len(w.layers), w.num_kv_heads, w.head_dim, capacity)

    def _rotary(self, length: int) -> None:
        if length <= self._cos.shape[0]:
            return
        cap = max(length, min(self.w.max_positions, 2 * self._cos.shape[0]), 256)
        pos = torch.arange(cap, dtype=torch.float64)
        freqs = torch.outer(pos, self.w.inv_freq.double())
        emb = torch.cat([freqs, freqs], dim=-1)
        self._cos = (emb.cos() * self.w.rope_scaling).float()
        self._sin = (emb.sin() * self.w.rope_scaling).float()

    def forward(self, tokens: list[int], positions: list[int],
                kvs: list[KVBuffer]) -> torch.Tensor:
        """Logits [len(tokens), vocab]; each row's keys/values are written to its buffer.

        A row at position ``p`` needs its buffer to hold ``0..p-1`` (earlier calls or
        earlier rows of this call). Afterwards each buffer's ``length`` is one past its
        last row.
        """
        w = self.w
        n = len(tokens)
        if not 0 < n <= self.max_rows:
            raise ValueError(f"{n} rows for a runner of at most {self.max_rows}")
        m = self.max_rows if self.pad else n
        self._rotary(max(positions) + 1)
        nh, nkv, hd = w.num_heads, w.num_kv_heads, w.head_dim
        group, q_size, half, eps = nh // nkv, nh * hd, hd // 2, w.rms_eps
        kv_end = q_size + nkv * hd
        pos = torch.tensor(positions + [0] * (m - n))
        cos, sin = self._cos[pos].unsqueeze(1), self._sin[pos].unsqueeze(1)
        # Runs of rows sharing a buffer (identity): buffer, first row, end row, first position.
        spans = [(kvs[g[0]], g[0], g[-1] + 1, positions[g[0]]) for g in (
            list(rows) for _, rows in itertools.groupby(range(n), kvs.__getitem__))]
        for buf, a, b, p0 in spans:
            buf.ensure(p0 + b - a)
        window = w.sliding_window
        x = w.embed[torch.tensor(tokens + [0] * (m - n))]
        for i, layer in enumerate(w.layers):
            qkv = layer.qkv(_rms(x, layer.input_norm, eps))
            q = qkv[:, :q_size].reshape(m, nh, hd)
            k = qkv[:, q_size:kv_end].reshape(m, nkv, hd)
            v = qkv[:, kv_end:].reshape(m, nkv, hd)
            if layer.q_norm is not None and layer.k_norm is not None:
                q = _rms(q, layer.q_norm, eps)
                k = _rms(k, layer.k_norm, eps)
            q = torch.addcmul(q * cos, torch.cat([-q[..., half:], q[..., :half]], -1), sin)
            k = torch.addcmul(k * cos, torch.cat([-k[..., half:], k[..., :half]], -1), sin)
            for buf, a, b, p0 in spans:
                buf.k[i, p0: p0 + b - a] = k[a:b]
                buf.v[i, p0: p0 + b - a] = v[a:b]
            att = torch.zeros(m, q_size)
            for r in range(n):
                p, buf = positions[r], kvs[r]
                lo = max(0, p - window + 1) if window else 0
                att[r] = F.scaled_dot_product_attention(
                    q[r].view(1, nkv, group, hd),
                    buf.k[i, lo: p + 1].permute(1, 0, 2).unsqueeze(0),
                    buf.v[i, lo: p + 1].permute(1, 0, 2).unsqueeze(0),
                    scale=self._scale,
                ).reshape(q_size)
            x = x + layer.o(att)
            gu = layer.gate_up(_rms(x, layer.post_norm, eps))
            x = x + layer.down(F.silu(gu[:, : w.intermediate]) * gu[:, w.intermediate:])
        for buf, a, b, p0 in spans:
            buf.length = max(buf.length, p0 + b - a)
        logits = w.lm_head(_rms(x, w.final_norm, eps))
        return logits[:n]
