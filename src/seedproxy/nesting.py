"""How deeply JSON may nest where it enters seedproxy: orjson encodes at most about 254
levels, so a value nested deeper than ``MAX_DEPTH`` is refused (or, for a model's own
output, kept as text) where it enters, and everything stored serialises."""

from __future__ import annotations

from typing import Any

__all__ = ["MAX_DEPTH", "too_deep"]

_CONTAINERS = (dict, list)

MAX_DEPTH = 64
"""The deepest nesting accepted: ``{}`` and ``[]`` are 1 level, ``{"a": []}`` 2."""


def too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether ``value`` (parsed JSON) nests more than ``limit`` objects or arrays deep
    (iterative: any depth is measured without recursion)."""
    level: list[Any] = [value] if isinstance(value, _CONTAINERS) else []
    for _ in range(limit):
        if not level:
            return False
        level = [child for item in level
                 for child in (item.values() if isinstance(item, dict) else item)
                 if isinstance(child, _CONTAINERS)]
    return bool(level)
