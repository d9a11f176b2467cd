"""Routed experts are repacked losslessly into the narrowest type that holds them."""

from __future__ import annotations

import base64
import struct

import pytest

from seedproxy.sessions.interaction import RoutedExperts


def wire(ids: list[int]) -> str:
    return base64.b64encode(struct.pack(f"<{len(ids)}i", *ids)).decode()


@pytest.mark.parametrize(
    ("top", "dtype", "width"), [(255, "uint8", 1), (256, "uint16", 2), (70000, "int32", 4)]
)
def test_the_narrowest_type_that_holds_the_largest_id(top: int, dtype: str, width: int) -> None:
    ids = [0, 1, 2, top, 5, 6]
    experts = RoutedExperts.from_wire(wire(ids), rows=3)
    assert experts is not None
    assert (experts.dtype, experts.rows, experts.cols) == (dtype, 3, 2)
    assert len(experts.data) == len(ids) * width
    assert experts.ids() == ids
    assert RoutedExperts.from_dict(experts.to_dict()) == experts


@pytest.mark.parametrize(
    ("value", "rows"),
    [("not base64!", 1), (base64.b64encode(b"abc").decode(), 1), (wire([1, 2, 3]), 2),
     (wire([-1, 2]), 1), (123, 1), (wire([1]), 0)],
)
def test_what_is_not_a_routing_array_is_not_recorded(value: object, rows: int) -> None:
    assert RoutedExperts.from_wire(value, rows) is None
