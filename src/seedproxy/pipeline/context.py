"""The admitted request, set once by seating (``Admission._seat``) and read by every
stage; a stage's output is its own object (``call.py``, ``recorder.py``, ``observer.py``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import uuid
from dataclasses import dataclass

from ..seeds import answer_basis
from ..sessions import Interaction, SessionRecord, Slot
from ..sessions.cursor import SessionView
from .request import ClientRequest
from .services import Services
from .tracing import NO_TRACE, Trace

__all__ = ["ContentSeat", "RequestContext"]


@dataclass(frozen=True, slots=True)
class ContentSeat:
    """A content-keyed request's key and the occurrence number it took."""

    key: str
    occurrence: int

    @property
    def interaction_id(self) -> str:
        """Its interaction's id: arrival-independent, unique in the session."""
        return f"c{self.key[:16]}.{self.occurrence}"


@dataclass(frozen=True, slots=True)
class RequestContext:
    services: Services
    client: ClientRequest
    session: SessionRecord | None
    slot: Slot | None
    seeds: list[int]
    arrived: float
    seat: ContentSeat | None = None
    """The content key and occurrence, in a content-keyed session."""
    compacted_from: str | None = None
    """The interaction whose history this request's summary replaces (the client said)."""
    left_out_tools: list[str] | None = None
    """The request's hosted tools left out of the prompt (a bridged Responses request)."""
    view: SessionView | None = None
    """This process's view of the session, checked current when the request was seated;
    its record links into it without another store read, and joins it."""
    trace: Trace = NO_TRACE
    replayed: bool = False
    """Answered from a resumed session's source record (``replaying.py``): no upstream."""

    @property
    def capture(self) -> bool:
        return self.session is not None

    @property
    def interaction_id(self) -> str:
        assert self.slot is not None
        return self.seat.interaction_id if self.seat is not None else self.slot.interaction_id

    @property
    def basis(self) -> str | None:
        """The basis of every id the client is shown (None outside a session): a pure
        function of the identity and the request's position, so replays match."""
        if self.session is None or self.slot is None:
            return None
        position = (f"content:{self.seat.key}:{self.seat.occurrence}" if self.seat is not None
                    else str(self.slot.index))
        return answer_basis(self.session.identity, position)

    def rid(self, choice: int) -> str | None:
        """SGLang's request id for choice ``choice``: from the session and index, unique
        on the fleet (a reused slot, an SDK retry, adds a random suffix: its first
        attempt may still run)."""
        if self.session is None or self.slot is None:
            return None
        digest = hashlib.blake2b(self.session.session_id.encode(), digest_size=8).hexdigest()
        rid = f"seedproxy-{digest}-{self.slot.index}-{choice}"
        return f"{rid}-{uuid.uuid4().hex[:8]}" if self.slot.reused else rid

    def replaying(self, recorded: Interaction) -> RequestContext:
        """This request answered from ``recorded``: its seeds are the ones the client is
        told and the record keeps (a fork's replayed part was sampled with the source's)."""
        return dataclasses.replace(self, seeds=list(recorded.seeds), replayed=True)
