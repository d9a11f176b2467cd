"""``ints``, the check every recorded token-id list passes, refuses exactly what the
per-id rule refuses: any entry that is not an int (bools included) from 0 to 2**31 - 1
makes the whole list absent; an accepted list is the one sent, not a copy."""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest

from seedproxy.wire.shapes import ints

_MAX = 2**31 - 1


def reference(value: Any) -> list[int]:
    """The rule, one id at a time."""
    if not isinstance(value, list):
        return []
    return value if all(type(v) is int and 0 <= v <= _MAX for v in value) else []


class Id(int):
    pass


ODD = [True, False, -1, -0.0, 0.5, 1.0, 1e20, _MAX + 1, 2**32, 2**63, 2**64, 2**70, -(2**63),
       "1", "", None, [], [1], {}, {"a": 1}, float("nan"), float("inf"), Id(3)]
GOOD = [0, 1, 9, 10, 123456789, 999999999, 1000000000, 2147483646, _MAX]


@pytest.mark.parametrize("odd", ODD, ids=repr)
def test_one_odd_entry_anywhere_makes_the_list_absent(odd: Any) -> None:
    for place in (0, 2, 5):
        value: list[Any] = [7, 8, 9, 10, 11]
        value.insert(place, odd)
        assert ints(value) == reference(value) == []


@pytest.mark.parametrize("good", GOOD)
def test_every_id_up_to_the_bound_is_kept_as_the_same_list(good: int) -> None:
    value = [good, 5, good]
    assert ints(value) is value
    assert reference(value) is value


@pytest.mark.parametrize("value", [None, 3, "1,2", {"a": [1]}, (1, 2), b"[1]"], ids=repr)
def test_what_is_not_a_list_is_absent(value: Any) -> None:
    assert ints(value) == reference(value) == []


def test_random_lists_agree_with_the_per_id_rule() -> None:
    draw = random.Random(2026)
    for _ in range(3000):
        value: list[Any] = [draw.choice(GOOD) if draw.random() < 0.97 else draw.choice(ODD)
                            for _ in range(draw.randrange(0, 12))]
        assert ints(value) == reference(value), value


def test_an_echoed_prompt_of_millions_is_checked_whole() -> None:
    """As parsed from an upstream's JSON: the last id alone decides."""
    kept = orjson.loads(orjson.dumps(list(range(2_000_000))))
    assert ints(kept) is kept
    for last in (-1, _MAX + 1, True, 1.5, None):
        bad = orjson.loads(orjson.dumps([*range(1_000_000), last]))
        assert ints(bad) == []
