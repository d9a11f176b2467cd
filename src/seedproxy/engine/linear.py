"""Row-invariant matrix products: ``y = x @ W.T (+ b)`` where row ``r`` of ``y`` depends only
on row ``r`` of ``x``, bit for bit.

Invariants:
- ``RowLinear`` prepacks ``W`` for oneDNN when torch has it, else keeps it dense for MKL's
  ``mm``; the kernel and its row count are fixed per engine.
- ``rows_invariant`` probes the kernel on the real weights: a row's result must not change
  with the number of rows (1..max_rows) or its place. When it holds, batches run
  unpadded; else the runner pads every product to ``max_rows`` rows (at one fixed shape a
  row's result is independent of the others: measured for MKL's sgemm, domain.md).
"""

from __future__ import annotations

import torch

__all__ = ["RowLinear", "rows_invariant"]

_PACK_ROWS = 8  # oneDNN's layout hint; fixed so the packed layout never depends on flags


class RowLinear:
    """A linear layer (no activation) over float32 rows."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None,
                 onednn: bool | None = None) -> None:
        weight = weight.detach().float().contiguous()
        self.out_features, self.in_features = int(weight.shape[0]), int(weight.shape[1])
        self.bias = None if bias is None else bias.detach().float().contiguous()
        if onednn is None:
            onednn = bool(torch.backends.mkldnn.is_available()) and hasattr(  # type: ignore[no-untyped-call]
                torch.ops.mkldnn, "_reorder_linear_weight")
        self.onednn = onednn
        self.weight = torch.ops.mkldnn._reorder_linear_weight(weight, _PACK_ROWS) if onednn \
            else weight

    @property
    def kernel(self) -> str:
        return "onednn-packed" if self.onednn else "mkl-mm"

    def nbytes(self) -> int:
        n = self.out_features * self.in_features * 4
        return n + (0 if self.bias is None else self.bias.numel() * 4)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` [rows, in] (contiguous) -> [rows, out]."""
        if self.onednn:
            y: torch.Tensor = torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias,
                                                                 "none", [], "")
            return y
        y = torch.mm(self.weight, x.t()).t()
        return y if self.bias is None else y + self.bias


def rows_invariant(linears: list[RowLinear], max_rows: int, seed: int = 0) -> bool:
    """True when each layer gives every row the same bits for 1..``max_rows`` rows."""
    gen = torch.Generator().manual_seed(seed)
    seen: set[tuple[int, int, bool]] = set()
    for lin in linears:
        key = (lin.out_features, lin.in_features, lin.bias is not None)
        if key in seen:
            continue
        seen.add(key)
        probe = torch.randn(max_rows, lin.in_features, generator=gen)
        alone = lin(probe[:1].contiguous())[0]
        for rows in range(2, max_rows + 1):
            x = torch.randn(rows, lin.in_features, generator=gen)
            at = (rows * 5 + 3) % rows
            x[at] = probe[0]
            if not torch.equal(lin(x)[at], alone):
                return False
    return True
