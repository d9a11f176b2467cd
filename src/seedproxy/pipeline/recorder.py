"""Recording one request's interaction: the only writer of what its record says.

Invariants: recorded at most once (``record``); from the first write on it is never
cancelled (``recording``). A client that left is recorded abandoned (499). A stream is
sealed before its terminal event (``seal``).
"""

from __future__ import annotations

import logging
import time
from array import array
from collections.abc import Callable, Sequence
from typing import Any

from ..dialects import Captured
from ..errors import SessionNotFound, StoreError
from ..sessions import Interaction
from .call import UpstreamCall
from .context import RequestContext

__all__ = ["CLIENT_CLOSED", "Recorder", "Snapshot"]

log = logging.getLogger("seedproxy.request")

CLIENT_CLOSED = 499
"""Status recorded for an answer whose client left before it was complete (nginx's code)."""

Snapshot = Callable[[], tuple[Any, Captured]]
"""(the recorded response, the captured tokens) of a stream so far."""


class Recorder:
    __slots__ = ("abandoned", "call", "ctx", "recorded", "recording", "status")

    def __init__(self, ctx: RequestContext, call: UpstreamCall) -> None:
        self.ctx = ctx
        self.call = call
        self.status = 200  # what the record says (a stream's failure sets it)
        self.abandoned = False  # the client left: whatever is recorded from now on says so
        self.recording = False
        self.recorded = False

    def stream_failed(self, status: int) -> None:
        self.status = status

    def abandon(self) -> None:
        self.abandoned = True

    async def record(self, status: int, response: Any, captured: Captured) -> None:
        """Record the interaction (once; nothing outside a session)."""
        ctx, call = self.ctx, self.call
        if ctx.session is None or ctx.slot is None or self.recorded:
            return
        self.recorded = self.recording = True
        if self.abandoned:
            status = CLIENT_CLOSED
        interaction = Interaction(
            interaction_id=ctx.interaction_id,
            request_index=ctx.slot.index,
            seeds=list(ctx.seeds),
            endpoint=ctx.client.endpoint.value,
            request=ctx.client.body,
            response=response,
            status=status,
            prompt_token_ids=_packed(captured.prompt_token_ids),
            choices=captured.choices,
            latency_ms=round((time.perf_counter() - ctx.arrived) * 1000, 3),
            upstream=call.upstream,
            abandoned=self.abandoned,
            dispatch_weight_version=call.dispatch_weight_version,
            tito=captured.lineage,
            content_key=ctx.seat.key if ctx.seat is not None else None,
            occurrence=ctx.seat.occurrence if ctx.seat is not None else None,
            replayed=ctx.replayed,
            compacted_from=ctx.compacted_from,
            left_out_tools=ctx.left_out_tools,
        )
        services = ctx.services
        with ctx.trace.child("record"):
            view = ctx.view
            assert view is not None  # seating's, with the slot
            # Stored once: what it adds to its base (its messages signed as they were read).
            link, sent = view.link_for(interaction, ctx.client.signed)
            view.take(await services.sessions.store.record(
                ctx.session.session_id, interaction, link=link, sent=sent, after=view.seq))
        services.metrics.recorded_tokens.inc(interaction.token_count)
        if interaction.tito is not None and status < 400:
            services.metrics.count_prompt(interaction.tito.get("prompt"))

    async def seal(self, snapshot: Snapshot) -> StoreError | SessionNotFound | None:
        """Record a stream before its terminal event. A store that fails, or a session
        deleted meanwhile, is returned for the stream to send instead of its end; the
        interaction is then never recorded later as a success."""
        try:
            await self.record(self.status, *snapshot())
        except (StoreError, SessionNotFound) as exc:
            log.warning("stream not recorded: %s", exc.message)
            self.status = exc.status_code
            self.recorded = True
            return exc
        return None

    async def finish(self, snapshot: Snapshot, *, unfinished: bool) -> None:
        """A stream is over: record it if not yet; ``unfinished``: its client left first."""
        if unfinished:
            self.abandoned = True
            self.status = CLIENT_CLOSED
        try:
            if not self.recorded:
                await self.record(self.status, *snapshot())
        except SessionNotFound:  # deleted while it ran: nothing to record into
            log.info("stream of a deleted session not recorded")


def _packed(ids: Sequence[int]) -> array[int]:
    """``ids`` as an ``array('i')``: one the reader packed already is taken as it is."""
    if isinstance(ids, array) and ids.typecode == "i":
        return ids
    return array("i", ids)
