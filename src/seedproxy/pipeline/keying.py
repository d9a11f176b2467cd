"""The content-keyed index mode: which content key and occurrence a request takes.

In a session with ``index_by == "content"``, a request's seeds derive from its content
key and the occurrence number of that key in the session (``seeds.content_seeds``),
not from its arrival index, so sibling requests fired concurrently get the same seeds
whatever order they arrive in. ``X-Request-Index`` still pins (the arrival rule's seed
of the pinned index); SDK retries reuse their first attempt's slot, and with it its
occurrence.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..seeds import content_key
from ..sessions import SessionRecord, SessionStore, Slot
from .request import ClientRequest

__all__ = ["ContentSeat", "content_seat"]


@dataclass(frozen=True, slots=True)
class ContentSeat:
    """A content-keyed request's key and the occurrence number it took."""

    key: str
    occurrence: int

    @property
    def interaction_id(self) -> str:
        """Its interaction's id: arrival-independent, unique in the session."""
        return f"c{self.key[:16]}.{self.occurrence}"


async def content_seat(
    store: SessionStore, session: SessionRecord, client: ClientRequest, slot: Slot,
    pinned: int | None,
) -> ContentSeat | None:
    """The seat of a request in a content-keyed session; None in arrival mode or when
    ``X-Request-Index`` pins the request."""
    if session.index_by != "content" or pinned is not None:
        return None
    key = content_key(client.endpoint.value, client.body)
    return ContentSeat(key, await store.occurrence(session.session_id, key, slot.interaction_id))
