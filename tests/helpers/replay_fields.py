"""The record fields that may differ between two runs of the same rollout (the
contract: "``created`` and timestamps are the only clock fields"; the session id names
the physical session, and ``group_id`` its default group, named after it;
``latency_ms`` is a clock reading; ``store_epoch`` names the store, which a replay
may not share). Everything else, answer ids
included, must be equal."""

from __future__ import annotations

from typing import Any

__all__ = ["MAY_DIFFER", "strip_documented"]

MAY_DIFFER = frozenset(
    {"session_id", "group_id", "latency_ms", "created", "created_at", "timestamp",
     "store_epoch"}
)


def strip_documented(value: Any) -> Any:
    """``value`` without the fields that may differ (and ``*_at`` timestamps), at any depth."""
    if isinstance(value, dict):
        return {k: strip_documented(v) for k, v in value.items()
                if k not in MAY_DIFFER and not k.endswith("_at")}
    if isinstance(value, list):
        return [strip_documented(v) for v in value]
    return value
