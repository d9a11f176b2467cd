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
from ..sessions import SessionRecord, Slot
from .request import ClientRequest

__all__ = ["ContentSeat", "content_seat", "seat_key"]


@dataclass(frozen=True, slots=True)
class ContentSeat:
    """A content-keyed request's key and the occurrence number it took."""

    key: str
    occurrence: int

    @property
    def interaction_id(self) -> str:
        """Its interaction's id: arrival-independent, unique in the session."""
        return f"c{self.key[:16]}.{self.occurrence}"


def seat_key(session: SessionRecord, client: ClientRequest, pinned: int | None) -> str | None:
    """The content key a request is seated by; None in arrival mode or when
    ``X-Request-Index`` pins the request."""
    if session.index_by != "content" or pinned is not None:
        return None
    return content_key(client.endpoint.value, client.body)


def content_seat(key: str | None, slot: Slot) -> ContentSeat | None:
    """The seat ``slot`` took for ``key`` (the store numbers it with the index)."""
    if key is None or slot.occurrence is None:
        return None
    return ContentSeat(key, slot.occurrence)
