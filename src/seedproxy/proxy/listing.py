"""``GET /sessions``: a bounded page of session summaries for the viewer and scripts.

Summaries are built only for the page asked for, so a page costs ``limit`` interaction
reads whatever the store holds.
"""

from __future__ import annotations

from typing import Any, Literal

from ..sessions import SessionRecord, SessionStore

__all__ = ["MAX_PAGE", "session_page", "state_of"]

MAX_PAGE = 500

State = Literal["open", "ended", "exported"]


def state_of(record: SessionRecord) -> State:
    """``exported`` wins over ``ended``: an exported session is ended or taken by name."""
    if record.exported:
        return "exported"
    return "ended" if record.ended else "open"


async def session_page(
    store: SessionStore,
    *,
    group_id: str | None,
    identity: str | None,
    offset: int,
    limit: int,
) -> dict[str, Any]:
    records = await store.list(group_id)
    if identity is not None:
        records = [r for r in records if r.identity == identity]
    page = records[offset : offset + limit]
    end = offset + len(page)
    return {
        "sessions": [await _summary(store, r) for r in page],
        "total": len(records),
        "next_offset": end if end < len(records) else None,
    }


async def _summary(store: SessionStore, record: SessionRecord) -> dict[str, Any]:
    interactions = await store.interactions(record.session_id)
    last = interactions[-1].to_dict() if interactions else {}
    summary: dict[str, Any] = {
        "session_id": record.session_id,
        "identity": record.identity,
        "group_id": record.group_id,
        "interactions": len(interactions),
        "state": state_of(record),
        "reward": record.reward,
        "upstream": last.get("upstream"),
        "metadata": record.metadata,
    }
    if last.get("weight_version") is not None:
        summary["weight_version"] = last["weight_version"]
    return summary
