"""``GET /sessions``: a bounded page of session summaries for the viewer and scripts.

A page is read from one of the store's indexes (creation order, group, identity), so
it costs ``limit`` records (plus ``offset``; a ``cursor``, the page before's
``next_cursor``, costs nothing) whatever the store holds. ``since`` (an earlier
``version``) answers ``{"version", "changed": false}`` alone while nothing changed.
"""

from __future__ import annotations

from typing import Any, Literal

from ..sessions import SessionRecord, SessionStore
from ..sessions.store.base import View

__all__ = ["MAX_PAGE", "SEQ_MAX", "session_page", "state_of"]

MAX_PAGE = 500
SEQ_MAX = 2**62
"""The largest ``cursor``/``since`` taken: sequence numbers and versions stay below."""

State = Literal["open", "ended", "exported"]


def state_of(record: SessionRecord) -> State:
    """``exported`` wins over ``ended``: an exported session is ended or taken by name."""
    if record.exported:
        return "exported"
    return "ended" if record.ended else "open"


async def session_page(store: SessionStore, *, group_id: str | None, identity: str | None,
                       offset: int, limit: int, cursor: int | None = None,
                       since: int | None = None) -> dict[str, Any]:
    version = await store.version()  # before the page: a later change moves it again
    if since is not None and since == version:
        return {"version": version, "changed": False}
    after = -1 if cursor is None else cursor
    if identity is not None and group_id is not None:
        # Both: one identity's few sessions, filtered by group.
        every = await store.scan("identity", key=identity,
                                 limit=await store.count("identity", key=identity))
        matching = [r for r in every if r.group_id == group_id]
        rest = [r for r in matching if r.created_seq > after]
        records, more = rest[offset : offset + limit], len(rest) > offset + limit
        total = len(matching)
    else:
        view: View = ("identity" if identity is not None
                      else "group" if group_id is not None else "all")
        key = identity if identity is not None else group_id
        found = await store.scan(view, key=key, after=after, offset=offset, limit=limit + 1)
        records, more = found[:limit], len(found) > limit
        total = await store.count(view, key=key)
    end = offset + len(records)
    answer: dict[str, Any] = {
        "sessions": [await _summary(store, r) for r in records],
        "total": total,
        "next_offset": end if more and cursor is None else None,
        "next_cursor": records[-1].created_seq if more else None,
        "version": version,
    }
    if since is not None:
        answer["changed"] = True
    return answer


async def _summary(store: SessionStore, record: SessionRecord) -> dict[str, Any]:
    if record.interaction_count is None:  # stored before summaries were kept
        interactions = await store.interactions(record.session_id)
        last: dict[str, Any] = dict(interactions[-1].to_dict()) if interactions else {}
        count, upstream, version = len(interactions), last.get("upstream"), last.get(
            "weight_version")
    else:
        count = record.interaction_count
        upstream, version = record.last_upstream, record.last_weight_version
    summary: dict[str, Any] = {
        "session_id": record.session_id, "identity": record.identity,
        "group_id": record.group_id, "interactions": count, "state": state_of(record),
        "reward": record.reward, "upstream": upstream, "metadata": record.metadata}
    if version is not None:
        summary["weight_version"] = version
    return summary
