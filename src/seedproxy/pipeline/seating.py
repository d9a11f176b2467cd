"""Seating a request: its seeds and its slot, taken once every check has passed.

Invariant: everything that can refuse the request raises before the slot is taken
(a 4xx uses no index, and a new session is created only when the request is sound);
the slot is taken atomically, before any await on the upstream, in the same store
operation that checks the session's view is current (a stale view comes back brought
up to date, and no index is taken: the caller checks the request again against it).

In a session with ``index_by == "content"``, a request's seeds derive from its content
key and the occurrence number of that key in the session (``seeds.content_seeds``),
not from its arrival index, so sibling requests fired concurrently get the same seeds
whatever order they arrive in. ``X-Request-Index`` still pins (the arrival rule's seed
of the pinned index); SDK retries reuse their first attempt's slot, and with it its
occurrence.
"""

from __future__ import annotations

from ..errors import BadRequest
from ..seeds import choice_seeds, client_choice_seeds, content_key, content_seeds
from ..sessions import NewSession, SessionRecord, Slot
from ..sessions.cursor import SessionView
from ..sessions.record import Stale
from .context import ContentSeat, RequestContext
from .request import ClientRequest, request_digest
from .services import Services
from .tracing import NO_TRACE, Trace

__all__ = ["seat"]


async def seat(services: Services, client: ClientRequest,
               session: SessionRecord | NewSession | None, *, pinned: int | None,
               retry: bool, arrived: float, compacted: str | None = None,
               trace: Trace = NO_TRACE, view: SessionView | None = None,
               check: bool = True, left_out_tools: list[str] | None = None,
               ) -> RequestContext | SessionView:
    """Check the seed rules, create the session if new, take the slot, derive seeds.
    ``compacted``: the interaction a compacted history replaces (recorded as such);
    ``trace``: the request's (the slot is its ``store.allocate`` span). ``view``: the
    session's, as the request was checked against; with ``check``, a view that lacks
    records comes back brought up to date instead of a context (no index taken).
    ``left_out_tools``: the hosted tools a bridged request's prompt leaves out (recorded)."""
    settings = services.settings
    deterministic = settings.deterministic
    fixed = client.seed
    if fixed is None and deterministic and session is not None:
        own = session.seed if isinstance(session, SessionRecord) else None
        fixed = own if own is not None else settings.seed
    configured = fixed is not None and client.seed is None
    if deterministic and client.n > 1 and configured and session is not None:
        raise BadRequest(
            f"a shared seed ({fixed}) with n={client.n} makes every choice identical; "
            "drop `seed` and let seedproxy derive one per choice",
            param="seed",
        )
    if session is None:
        seeds = [client.seed] if client.seed is not None else []
        return RequestContext(services, client, None, None, seeds, arrived, trace=trace,
                              left_out_tools=left_out_tools)
    if isinstance(session, NewSession):
        session = await services.sessions.get_or_create(session.session_id)
    if view is None:
        view = services.sessions.cursors.keep(session)
    digest = request_digest(client.endpoint, client.raw)
    key = seat_key(session, client, pinned)
    with trace.child("store.allocate"):  # view check, index and occurrence: one atomic step
        slot = await services.sessions.store.allocate(
            session.session_id, digest=digest, retry=retry, pinned=pinned, content_key=key,
            created_seq=session.created_seq, after=view.seq if check else None)
    if isinstance(slot, Stale):
        view.apply(slot.seq, slot.blobs)
        return view
    position = content_seat(key, slot)
    if not deterministic:
        seeds = [client.seed] if client.seed is not None else []
    elif client.seed is not None and client.n > 1:
        seeds = client_choice_seeds(client.seed, client.n)
    elif fixed is not None:
        seeds = [fixed]
    elif position is not None:
        seeds = content_seeds(session.identity, position.key, position.occurrence, client.n)
    else:
        seeds = choice_seeds(session.identity, slot.index, client.n)
    return RequestContext(services, client, session, slot, seeds, arrived, seat=position,
                          compacted_from=compacted, trace=trace, view=view,
                          left_out_tools=left_out_tools)


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
