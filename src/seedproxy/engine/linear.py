"""Row-invariant matrix products: ``y = x @ W.T (+ b)`` where row ``r`` of ``y`` depends only
on row ``r`` of ``x``, bit for bit, whatever the other rows hold.

Invariants:
- ``RowLinear`` prepacks ``W`` for oneDNN when torch has it, else keeps it dense for MKL's
  ``mm``. Which kernel and how many rows it runs at are fixed per engine.
- ``rows_invariant(linears, max_rows)`` probes the kernel on the real weights: a row's
  result must not change with the number of rows (1..max_rows) or with which row it sits
  in. When it holds (oneDNN's packed kernel on this CPU), batches run unpadded; when it
  does not, the runner pads every product to ``max_rows`` rows, since at one fixed shape a
  row's result is independent of the other rows (measured for MKL's sgemm, domain.md).
"""

from __future__ import annotations

import torch

__all__ = ["RowLinear", "rows_invariant"]

_PACK_ROWS = 8  # oneDNN's layout hint; fixed so the packed layout never depends on flags


def _onednn_available() -> bool:
    return bool(torch.backends.mkldnn.is_available()) and hasattr(  # type: ignore[no-untyped-call]
        torch.ops.mkldnn, "_reorder_linear_weight")


class RowLinear:
    """A linear layer (no activation) over float32 rows."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None,
                 onednn: bool | None = None) -> None:
        weight = weight.detach().float().contiguous()
        self.out_features, self.in_features = int(weight.shape[0]), int(weight.shape[1])
        self.bias = None if bias is None else bias.detach().float().contiguous()
        self.onednn = _onednn_available() if onednn is None else onednn
        if self.onednn:
            self.weight = torch.ops.mkldnn._reorder_linear_weight(weight, _PACK_ROWS)
        else:
            self.weight = weight

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
