"""One request's state and lifecycle, from its seat to its last byte.

Invariants (nothing outside this class writes its fields: ``seating.seat`` builds it with
what admission decided, and the stages call its methods):
- Every upstream reply the exchange opens is added the moment it exists and closed
  exactly once: by ``close`` when the answer was whole (or failed), by
  ``finish_stream`` when a stream response took them.
- The interaction is recorded at most once (``record``); from the first write on it
  is never cancelled (``recording``). A client that left is recorded abandoned (499).
- Every answer, error or stream is observed once (metrics and the request log line)
  and carries the same ``x-seedproxy-*`` headers (``headers``).
- A failure's status is the error's (``failure.py`` maps what is not yet an error);
  an ``UpstreamError`` (or a parse worker's refusal, ``offload.py``) not yet recorded
  is recorded with the body the client is shown.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
import uuid
from array import array
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from starlette.responses import Response

from ..dialects import Captured, UpstreamRequest
from ..errors import (
    ParserBusy,
    ParserUnavailable,
    SeedProxyError,
    SessionNotFound,
    StoreError,
    UpstreamError,
)
from ..fleet.dispatch import Dispatch
from ..fleet.upstream import UpstreamReply
from ..seeds import answer_basis
from ..sessions import Interaction, SessionRecord, Slot
from ..sessions.cursor import SessionView
from .failure import UpstreamAnswered
from .headers import seedproxy_headers
from .keying import ContentSeat
from .request import ClientRequest
from .services import Services
from .tracing import NO_SPAN, NO_TRACE, Attributes, Span, Trace

if TYPE_CHECKING:
    from .presenters import Presenter

__all__ = ["CLIENT_CLOSED", "Exchange", "Snapshot"]

log = logging.getLogger("seedproxy.request")

_RECORDED = (UpstreamError, ParserUnavailable, ParserBusy)
"""Failures after the upstream was asked: the interaction is recorded with them."""

CLIENT_CLOSED = 499
"""Status recorded for an answer whose client left before it was complete (nginx's code)."""

Snapshot = Callable[[], tuple[Any, Captured]]
"""(the recorded response, the captured tokens) of a stream so far."""


@dataclass(slots=True, eq=False)
class Exchange:
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
    upstream_s: float = 0.0
    upstream: str | None = None
    dispatch_weight_version: str | None = None
    status: int = 200
    """What the record says; a stream sets it when the upstream fails mid-stream."""
    abandoned: bool = False
    """The client left before its answer: whatever is recorded from now on says so."""
    recording: bool = False
    replayed: bool = False
    """Answered from a resumed session's source record (``replaying.py``): no upstream."""
    view: SessionView | None = None
    """This process's view of the session, checked current when the request was seated
    (``seating.py``); its record links into it without another store read, and joins
    it (``SessionView.take``)."""
    dispatches: list[Dispatch] = field(default_factory=list)
    """Where each upstream request is running; see ``inflight.py``."""
    trace: Trace = NO_TRACE
    """This request's trace (``tracing.py``); ended when the exchange is observed."""
    _upstream_span: Span = NO_SPAN
    """The upstream call's span: from the first send until the answer is read whole."""
    _replies: list[UpstreamReply] = field(default_factory=list)
    _streaming: bool = False
    _recorded: bool = False

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

    def headers(self) -> dict[str, str]:
        headers = seedproxy_headers(
            self.session.session_id if self.session else None,
            self.slot.index if self.slot else None, self.seeds, self.upstream)
        headers["x-seedproxy-overhead-ms"] = f"{self.overhead_ms():.3f}"
        if self.replayed:
            headers["x-seedproxy-replayed"] = "true"
        return headers

    def replay(self, recorded: Interaction) -> None:
        """Answer from ``recorded``: its seeds are the ones the client is told and the
        record keeps (a fork's replayed part was sampled with the source's)."""
        self.seeds = list(recorded.seeds)
        self.replayed = True
        self.services.metrics.replayed.inc()

    def stream_failed(self, status: int) -> None:
        """A stream broke off with ``status``: what its record says from now on."""
        self.status = status

    def abandon(self) -> None:
        """The client left before its answer: whatever is recorded from now on says so."""
        self.abandoned = True

    def waited_upstream(self, seconds: float) -> None:
        """Add ``seconds`` spent waiting on the upstream (not the proxy's overhead)."""
        self.upstream_s += seconds

    def overhead_ms(self) -> float:
        return max(0.0, (time.perf_counter() - self.arrived - self.upstream_s) * 1000)

    # -- upstream side -------------------------------------------------------------

    def rid(self, choice: int) -> str | None:
        """SGLang's request id for choice ``choice``: from the session and index, unique
        on the fleet (a reused slot, an SDK retry, adds a random suffix: its first
        attempt may still run)."""
        if self.session is None or self.slot is None:
            return None
        digest = hashlib.blake2b(self.session.session_id.encode(), digest_size=8).hexdigest()
        rid = f"seedproxy-{digest}-{self.slot.index}-{choice}"
        return f"{rid}-{uuid.uuid4().hex[:8]}" if self.slot.reused else rid

    async def send_all(self, requests: list[UpstreamRequest]) -> list[UpstreamReply]:
        """Send ``requests`` together (one per choice) and fill in where they ran. Raises
        the first ``UpstreamError`` (never answered) or ``UpstreamAnswered`` (an error
        status); the replies are this exchange's to close either way."""
        services = self.services
        key = self.session.session_id if self.session else None
        self._upstream_span.end()
        span = self._upstream_span = self.trace.child("upstream")
        for request in requests:
            span.inject(request.headers)  # the upstream's own spans join the trace
        if services.sender.rids:
            for j, request in enumerate(requests):
                rid = self.rid(j)
                if rid is not None and "rid" not in request.body:
                    request.body["rid"] = rid

        async def send(request: UpstreamRequest) -> UpstreamReply:
            dispatch = Dispatch()
            self.dispatches.append(dispatch)
            reply = await services.sender.send(
                request, key=key, stream=self.client.stream, dispatch=dispatch)
            self._replies.append(reply)
            return reply

        results: list[UpstreamReply | BaseException]
        if len(requests) == 1:  # no task per request on the common path (bench/compare.py)
            try:
                results = [await send(requests[0])]
            except UpstreamError as exc:
                results = [exc]
        else:
            results = await asyncio.gather(*(send(r) for r in requests), return_exceptions=True)
        replies = [r for r in results if isinstance(r, UpstreamReply)]
        self.upstream = ",".join(dict.fromkeys(r.upstream for r in replies)) or None
        if self.upstream is not None:
            span.set("seedproxy.upstream", self.upstream)
        versions = {r.dispatch_weight_version for r in replies}
        self.dispatch_weight_version = versions.pop() if len(versions) == 1 else None
        self.upstream_s = max((r.waited_s for r in replies),
                              default=time.perf_counter() - self.arrived)
        failovers = sum(r.failovers for r in replies)
        if failovers:
            services.metrics.failovers.inc(failovers)
        failure = next((r for r in results if isinstance(r, BaseException)), None)
        if failure is not None:
            raise failure
        bad = next((r for r in replies if r.response.status_code >= 400), None)
        if bad is not None:
            await bad.response.aread()
            raise UpstreamAnswered(bad.response.status_code, bad.response.content)
        return replies

    async def timed(self, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """Yield upstream chunks, adding the time spent waiting for them."""
        iterator = chunks.__aiter__()
        while True:
            started = time.perf_counter()
            try:
                chunk = await iterator.__anext__()
            except StopAsyncIteration:
                self.upstream_s += time.perf_counter() - started
                return
            self.upstream_s += time.perf_counter() - started
            yield chunk

    async def close(self) -> None:
        """Close every reply not taken by a stream, even when closing one raises."""
        self._upstream_span.end()
        if not self._streaming:
            await _close_all(self._replies)

    def take_replies(self) -> None:
        """A stream response took the replies: ``finish_stream`` closes them."""
        self._streaming = True

    @property
    def streaming(self) -> bool:
        return self._streaming

    # -- recording and observing ---------------------------------------------------

    async def record(self, status: int, response: Any, captured: Captured) -> None:
        """Record the interaction (once; nothing outside a session)."""
        self._upstream_span.end()  # the answer was read whole (or failed)
        if self.session is None or self.slot is None or self._recorded:
            return
        self._recorded = self.recording = True
        abandoned = self.abandoned
        if abandoned:
            status = CLIENT_CLOSED
        interaction = Interaction(
            interaction_id=self.interaction_id,
            request_index=self.slot.index,
            seeds=list(self.seeds),
            endpoint=self.client.endpoint.value,
            request=self.client.body,
            response=response,
            status=status,
            prompt_token_ids=_packed(captured.prompt_token_ids),
            choices=captured.choices,
            latency_ms=round((time.perf_counter() - self.arrived) * 1000, 3),
            upstream=self.upstream,
            abandoned=abandoned,
            dispatch_weight_version=self.dispatch_weight_version,
            tito=captured.lineage,
            content_key=self.seat.key if self.seat is not None else None,
            occurrence=self.seat.occurrence if self.seat is not None else None,
            replayed=self.replayed,
            compacted_from=self.compacted_from,
            left_out_tools=self.left_out_tools,
        )
        sessions = self.services.sessions
        with self.trace.child("record"):
            view = self.view
            assert view is not None  # seating's, with the slot
            # Stored once: what it adds to its base (its messages signed as they were read).
            link, sent = view.link_for(interaction, self.client.signed)
            view.take(await sessions.store.record(self.session.session_id, interaction,
                                                  link=link, sent=sent, after=view.seq))
        self.services.metrics.recorded_tokens.inc(interaction.token_count)
        if interaction.tito is not None and status < 400:
            self.services.metrics.count_prompt(interaction.tito.get("prompt"))

    def observe(self, status: int) -> None:
        """Count the answer, log its line, end its trace (once per exchange)."""
        self.trace.end(status, self.span_attributes)
        settings = self.services.settings
        overhead_s = self.overhead_ms() / 1000
        self.services.metrics.observe(
            self.client.endpoint.value, status, self.upstream, overhead_s, self.upstream_s)
        if settings.log_requests and log.isEnabledFor(logging.INFO):
            # log.info() without findCaller's walk up the stack (the record says line 0).
            log.handle(log.makeRecord(
                log.name, logging.INFO, __file__, 0, "request", (), None, "observe",
                extra={
                    "session": self.session.session_id if self.session else None,
                    "index": self.slot.index if self.slot else None,
                    "seed": self.seeds,
                    "upstream": self.upstream,
                    "status": status,
                    "proxy_ms": round(overhead_s * 1000, 3),
                    "upstream_ms": round(self.upstream_s * 1000, 3),
                },
            ))

    def span_attributes(self) -> Attributes:
        """The request span's attributes: where the request ran, and its seeds."""
        attributes: dict[str, str | int | list[int]] = {}
        if self.seeds:
            attributes["seedproxy.seed"] = self.seeds
        if self.session is not None:
            attributes["seedproxy.session"] = self.session.session_id
            attributes["seedproxy.identity"] = self.session.identity
        if self.slot is not None:
            attributes["seedproxy.index"] = self.slot.index
        if self.upstream is not None:
            attributes["seedproxy.upstream"] = self.upstream
        return attributes

    def answer(self, content: bytes, media_type: str, status: int = 200) -> Response:
        """The client's whole answer: headers, observed."""
        headers = self.headers()
        self.observe(status)
        return Response(content, status_code=status, headers=headers, media_type=media_type)

    async def fail(self, exc: SeedProxyError, presenter: Presenter) -> Response:
        """The client's error answer for ``exc``, in its protocol: an upstream failure (or
        an answer the parse workers refused) not yet recorded is recorded with the body
        the client is shown."""
        if isinstance(exc, _RECORDED) and not self.recording:
            await self.record(exc.status_code, presenter.errors.body(exc), Captured())
        headers = self.headers()
        self.observe(exc.status_code)
        return presenter.errors.response(exc, headers)

    # -- streams ---------------------------------------------------------------------

    async def seal(self, snapshot: Snapshot) -> StoreError | SessionNotFound | None:
        """Record a stream before its terminal event. A store that fails, or a session
        deleted meanwhile, is returned for the stream to send instead of its end; the
        interaction is then never recorded later as a success."""
        try:
            await self.record(self.status, *snapshot())
        except (StoreError, SessionNotFound) as exc:
            log.warning("stream not recorded: %s", exc.message)
            self.status = exc.status_code
            self._recorded = True
            return exc
        return None

    async def finish_stream(self, snapshot: Snapshot, *, abandoned: bool) -> None:
        """A stream is over: close its replies, then record (if not yet) and observe.
        A stream the client left before its end is aborted on its servers too."""
        unfinished = abandoned and not self._recorded
        self._upstream_span.end()
        self.services.inflight.leave(self)
        try:
            await _close_all(self._replies)
        finally:
            if unfinished:
                self.abandoned = True
                self.status = CLIENT_CLOSED
            try:
                if not self._recorded:
                    await self.record(self.status, *snapshot())
            except SessionNotFound:  # deleted while it ran: nothing to record into
                log.info("stream of a deleted session not recorded")
            finally:
                self.observe(self.status)
                if unfinished:
                    for reply in self._replies:
                        await self.services.pool.abort(reply)


def _packed(ids: Sequence[int]) -> array[int]:
    """``ids`` as an ``array('i')``: one the reader packed already is taken as it is."""
    if isinstance(ids, array) and ids.typecode == "i":
        return ids
    return array("i", ids)


async def _close_all(replies: list[UpstreamReply]) -> None:
    """``aclose`` each reply (idempotent); a failure does not skip the rest."""
    if not replies:
        return
    try:
        await replies[0].aclose()
    finally:
        await _close_all(replies[1:])
