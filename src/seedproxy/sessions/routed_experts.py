"""MoE routed experts (R3), stored compactly for routing replay.

SGLang returns ``meta_info.routed_experts`` as base64 of a little-endian int32 array,
one row per position of the sequence so far but the last (``prompt + completion - 1``
rows), ``num_layers * topk`` expert ids per row. Expert ids are small, so the record
keeps them in the narrowest unsigned type that holds the largest id (uint8 up to 255,
uint16 up to 65535, else int32): 4x smaller than the wire for current models, lossless.
"""

from __future__ import annotations

import base64
import binascii
import sys
from array import array
from dataclasses import dataclass
from typing import Any

__all__ = ["RoutedExperts"]

_TYPECODES = {"uint8": "B", "uint16": "H", "int32": "i"}


@dataclass(frozen=True, slots=True)
class RoutedExperts:
    """Expert ids, row-major, ``rows`` x ``cols``, as ``dtype`` (little-endian)."""

    dtype: str
    rows: int
    cols: int
    data: bytes

    @classmethod
    def from_wire(cls, value: Any, rows: int) -> RoutedExperts | None:
        """Repack SGLang's base64 int32 array; None when it is not one, or does not
        split into ``rows`` equal rows."""
        if not isinstance(value, str) or rows <= 0:
            return None
        try:
            raw = base64.b64decode(value, validate=True)
        except binascii.Error:
            return None
        if len(raw) % 4:
            return None
        ids = array("i")
        ids.frombytes(raw)
        if sys.byteorder == "big":
            ids.byteswap()
        if len(ids) % rows or (ids and min(ids) < 0):
            return None
        top = max(ids, default=0)
        dtype = "uint8" if top < 2**8 else "uint16" if top < 2**16 else "int32"
        packed = array(_TYPECODES[dtype], ids)
        if sys.byteorder == "big":
            packed.byteswap()
        return cls(dtype, rows, len(ids) // rows, packed.tobytes())

    def ids(self) -> list[int]:
        values = array(_TYPECODES[self.dtype])
        values.frombytes(self.data)
        if sys.byteorder == "big":
            values.byteswap()
        return values.tolist()

    def to_dict(self) -> dict[str, Any]:
        return {"dtype": self.dtype, "shape": [self.rows, self.cols],
                "data": base64.b64encode(self.data).decode("ascii")}

    @classmethod
    def from_dict(cls, data: Any) -> RoutedExperts | None:
        if not isinstance(data, dict):
            return None
        rows, cols = data["shape"]
        return cls(data["dtype"], rows, cols, base64.b64decode(data["data"]))
