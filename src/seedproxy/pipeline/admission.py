"""The front half of every request, one ``Admission`` per client protocol, and ``run``.

An admission reads and checks the body (its images too: ``media``), translates it,
renders a token-in-token-out prompt, seats the request (its ``RequestContext``), and
picks its strategies: the ``Reader`` from the mode and ``n``, the ``Presenter`` from
the client's protocol. The one way in is ``proxy.hot``'s ``HotRoutes.answer``.

Seating: everything that can refuse the request raises before the slot is taken (a 4xx
uses no index, and a new session is created only when the request is sound); the slot
is taken atomically, before any await on the upstream, in the same store operation
that checks the session's view is current (a stale view comes back brought up to date,
no index taken, and the request is checked again against it). In a session with
``index_by == "content"``, the seeds derive from the content key and its occurrence
number (``seeds.content_seeds``), not the arrival index, so concurrent siblings get the
same seeds whatever their order; ``X-Request-Index`` still pins (the arrival rule's
seed), and SDK retries reuse their first attempt's slot and occurrence.

Refused requests (an error answered on a model route before an upstream saw the
request) are counted in ``/metrics`` (``seedproxy_refusals_total`` by route, status
and reason) and, unless request logging is off, logged as one JSON line (``event:
refused``) with the error's message. The reason is a bounded label, never the client's
text: the error's ``code``, else the first field of its ``param`` (at most
``_REASON_CHARS`` of ``[a-z0-9_]``, else ``other``), else its ``type``.
"""

from __future__ import annotations

import itertools
import logging
import re
import time
from collections.abc import Awaitable, Callable, Sequence

import orjson
from starlette.requests import Request
from starlette.responses import Response

from ..bridges import as_chat
from ..bridges.responses import left_out_tools
from ..dialects import Captured, Endpoint
from ..error_presenters import ANTHROPIC, OPENAI
from ..errors import (
    BadRequest,
    ClientClosed,
    ParserBusy,
    ParserUnavailable,
    SeedProxyError,
    SessionNotFound,
    UpstreamError,
)
from ..media import CheckedImage
from ..seeds import choice_seeds, client_choice_seeds, content_key, content_seeds
from ..sessions import NewSession, SessionRecord, Slot
from ..sessions.cursor import SessionView
from ..sessions.ids import check_id
from ..sessions.record import Stale
from ..settings import Settings
from .call import UpstreamCall
from .context import ContentSeat, RequestContext
from .departure import stop_when_client_leaves, unless_client_leaves
from .headers import compacted_from, is_sdk_retry, pinned_index
from .observer import Observer
from .presenters import MessagesPresenter, OpenAIPresenter, Presenter, ResponsesPresenter
from .readers import Reader
from .readers.fanout import FanoutReader
from .readers.passthrough import PassthroughReader
from .readers.record import RecordReader
from .readers.tito import TitoReader, TitoTurn, prepare
from .recorder import Recorder
from .request import ClientRequest, client_request, read_body, request_digest
from .services import Services
from .streaming import StreamResponse
from .tracing import Trace

__all__ = ["Admission", "Resolve", "reason_of", "run"]

log = logging.getLogger("seedproxy.request")

Resolve = Callable[[], Awaitable[SessionRecord | NewSession | None]]
Seated = tuple[RequestContext, dict[str, object] | None, TitoTurn | None]

_RECORDED = (UpstreamError, ParserUnavailable, ParserBusy)
"""Failures after the upstream was asked: the interaction is recorded with them."""

_STALE_TRIES = 3
"""Seatings that check the view; a request whose session keeps changing under it (its
concurrent turns recorded meanwhile) is seated on the view it holds then."""


class Admission:
    """``messages``: Anthropic's Messages protocol (its shapes, errors included);
    otherwise OpenAI's routes (chat, completions, Responses, ``/generate``)."""

    def __init__(self, services: Services, *, messages: bool = False) -> None:
        self.services = services
        self.messages = messages
        self.errors = ANTHROPIC if messages else OPENAI

    async def handle(self, request: Request, endpoint: Endpoint,
                     session: SessionRecord | NewSession | None,
                     resolve: Resolve | None = None) -> Response:
        """Answer one request; any refusal in the protocol's error shape. Its trace
        (``tracing.py``) ends with the answer: here, or when its stream ends.
        ``resolve``: the request's session read again from the store, for a session
        this process knows that the store has lost (deleted, expired)."""
        arrived = time.perf_counter()
        trace = self.services.tracer.start(endpoint.value, request.headers)
        admitting = trace.child("admission")
        call: UpstreamCall | None = None
        try:
            raw = await read_body(request, self.services.settings.max_body_bytes)
            seated: Seated | SessionView | None = None
            for attempt in itertools.count():
                try:
                    seated = await self._seat(request, endpoint, raw, session, arrived, trace,
                                              check=attempt < _STALE_TRIES)
                except SessionNotFound:
                    if resolve is None or not isinstance(session, SessionRecord):
                        raise
                    self.services.sessions.cursors.forget(session.session_id)
                    session, resolve = await resolve(), None
                    continue
                if not isinstance(seated, SessionView):
                    break
                session = seated.record  # its view lacked records: check it again
            assert isinstance(seated, tuple)
            (ctx, chat, turn), recorded = seated, None
            call = UpstreamCall(ctx)
            if ctx.session is not None and ctx.session.replays and ctx.slot is not None:
                recorded = await self.services.replays.lookup(
                    ctx.session, ctx.slot.index, ctx.interaction_id, ctx.client,
                    pinned=pinned_index(request.headers) is not None,
                    streamable=self.messages or chat is None)
            reader: Reader
            if recorded is not None:
                ctx = ctx.replaying(recorded)
                call = UpstreamCall(ctx)
                self.services.metrics.replayed.inc()
                reader = RecordReader(ctx, recorded, messages=self.messages)
            else:
                reader = self._reader(ctx, chat, turn)
            admitting.end()
            presenter: Presenter
            if self.messages:
                presenter = MessagesPresenter(ctx.client.body, ctx.seeds[0] if ctx.seeds else None)
            else:
                presenter = ResponsesPresenter(ctx.client.body) if chat is not None else (
                    OpenAIPresenter(endpoint))
            return await run(call, reader, presenter, request)
        except SeedProxyError as exc:
            observer = Observer(call.ctx, call) if call is not None else None
            trace.end(exc.status_code, observer.span_attributes if observer else None)
            shown = {"x-seedproxy-overhead-ms": f"{(time.perf_counter() - arrived) * 1000:.3f}"}
            slot = call.ctx.slot if call is not None else None
            self.refused(endpoint, exc, session, slot.index if slot is not None else None)
            return self.errors.response(exc, observer.headers() if observer else shown)
        finally:
            admitting.end()
            if call is None or not call.streaming:
                trace.end(500)  # a bug raised past everything (else it has ended)

    async def _seat(self, request: Request, endpoint: Endpoint, raw: bytes,
                    session: SessionRecord | NewSession | None, arrived: float, trace: Trace,
                    *, check: bool) -> Seated | SessionView:
        """Check the request against the session's view and seat it (see the module):
        the context with the chat request and turn it sends, or (with ``check``) the
        view brought up to date when it lacked records."""
        services = self.services
        view = None
        if isinstance(session, SessionRecord):  # this process's view: no store operation
            with trace.child("store.view"):
                view = services.sessions.cursors.keep(session)
        parser = services.parser
        parse = parser.signed_body(endpoint, raw, view.last_sent() if view is not None else None,
                                   signs=session is not None)
        if parser.offloads(len(raw)):  # a client that leaves frees its parse slot
            parse = stop_when_client_leaves(parse, request.receive)
        body, signed = await parse
        client = client_request(endpoint, raw, body, signed)
        images = await services.images.check(endpoint, body)
        chat, turn = await self._translate(client, view, images)
        headers = request.headers
        pinned, retry, compacted = (pinned_index(headers), is_sdk_retry(headers),
                                    compacted_from(headers))
        left_out = ((left_out_tools(body) or None) if chat is not None
                    and endpoint is Endpoint.RESPONSES else None)
        fixed = _fixed_seed(services.settings, client, session)
        if session is None:
            seeds = [client.seed] if client.seed is not None else []
            return RequestContext(services, client, None, None, seeds, arrived, trace=trace,
                                  left_out_tools=left_out), chat, turn
        if isinstance(session, NewSession):
            session = await services.sessions.get_or_create(session.session_id)
        if view is None:
            view = services.sessions.cursors.keep(session)
        digest = request_digest(endpoint, raw)
        key = (content_key(endpoint.value, body)
               if session.index_by == "content" and pinned is None else None)
        with trace.child("store.allocate"):  # view check, index and occurrence: one atomic step
            slot = await services.sessions.store.allocate(
                session.session_id, digest=digest, retry=retry, pinned=pinned, content_key=key,
                created_seq=session.created_seq, after=view.seq if check else None)
        if isinstance(slot, Stale):
            view.apply(slot.seq, slot.blobs)
            return view
        seat = (ContentSeat(key, slot.occurrence)
                if key is not None and slot.occurrence is not None else None)
        seeds = _seeds(services.settings, client, session, slot, seat, fixed)
        return RequestContext(services, client, session, slot, seeds, arrived, seat=seat,
                              compacted_from=compacted, trace=trace, view=view,
                              left_out_tools=left_out), chat, turn

    def refused(self, endpoint: Endpoint, exc: SeedProxyError,
                session: SessionRecord | NewSession | str | None, index: int | None = None
                ) -> None:
        """Count and log a request refused on ``endpoint`` before an upstream saw it (see
        the module); ``session``: its record, or the id its path named (logged only when
        it is a valid id); ``index`` when the request had taken one already. A client
        that left is not a refusal."""
        if isinstance(exc, ClientClosed):
            return
        name = session if isinstance(session, str) or session is None else session.session_id
        if isinstance(session, str):
            try:
                check_id(session, param="session_id")
            except BadRequest:
                name = None
        reason = reason_of(exc)
        self.services.metrics.refused(endpoint.value, exc.status_code, reason)
        if self.services.settings.log_requests and log.isEnabledFor(logging.INFO):
            log.handle(log.makeRecord(
                log.name, logging.INFO, __file__, 0, "refused", (), None, "refused",
                extra={"session": name, "index": index, "status": exc.status_code,
                       "route": endpoint.value, "reason": reason,
                       "detail": exc.message[:_DETAIL_CHARS]},
            ))

    async def _translate(self, client: ClientRequest, view: SessionView | None,
                         images: Sequence[CheckedImage] = ()
                         ) -> tuple[dict[str, object] | None, TitoTurn | None]:
        """The chat request an upstream is sent instead (a bridge), and the rendered
        token-in-token-out turn; both raise their 4xx before the slot. ``images``: the
        client body's, checked (a bridged body's are read again from its chat form, in
        the order the prompt holds them)."""
        services, endpoint = self.services, client.endpoint
        if self.messages and client.n != 1:
            raise BadRequest("n: the Messages API answers one message per request", param="n")
        chat = as_chat(endpoint, client.body, tito=services.tito is not None,
                       seeds_responses=services.backend.seeds_responses)
        mode = services.tito
        if mode is None or not (self.messages or endpoint in (Endpoint.CHAT, Endpoint.RESPONSES)):
            return chat, None
        if chat is not None and images:
            images = await services.images.check(Endpoint.CHAT, chat)
        turn = await prepare(mode, chat or client.body, view,
                             signed=client.signed if chat is None else None, images=images)
        return chat, turn

    def _reader(self, ctx: RequestContext, chat: dict[str, object] | None,
                turn: TitoTurn | None) -> Reader:
        client = ctx.client
        inject = ctx.seeds[0] if ctx.seeds and self.services.settings.deterministic else None
        if turn is not None:
            assert self.services.tito is not None
            return TitoReader(ctx, self.services.tito, turn,
                              chat_client=client.endpoint is Endpoint.CHAT)
        if chat is not None:
            return PassthroughReader(ctx, Endpoint.CHAT, dict(chat), inject, raw=False)
        if len(ctx.seeds) > 1:
            return FanoutReader(ctx, client.endpoint, client.body)
        return PassthroughReader(ctx, client.endpoint, client.body, inject, raw=True)


def _fixed_seed(settings: Settings, client: ClientRequest,
                session: SessionRecord | NewSession | None) -> int | None:
    """The one seed every choice shares (the client's, the session's or ``--seed``), if
    any; refused when it would make n > 1 choices identical."""
    fixed = client.seed
    if fixed is None and settings.deterministic and session is not None:
        own = session.seed if isinstance(session, SessionRecord) else None
        fixed = own if own is not None else settings.seed
    if (settings.deterministic and client.n > 1 and fixed is not None and client.seed is None
            and session is not None):
        raise BadRequest(
            f"a shared seed ({fixed}) with n={client.n} makes every choice identical; "
            "drop `seed` and let seedproxy derive one per choice",
            param="seed",
        )
    return fixed


def _seeds(settings: Settings, client: ClientRequest, session: SessionRecord, slot: Slot,
           seat: ContentSeat | None, fixed: int | None) -> list[int]:
    if not settings.deterministic:
        return [client.seed] if client.seed is not None else []
    if client.seed is not None and client.n > 1:
        return client_choice_seeds(client.seed, client.n)
    if fixed is not None:
        return [fixed]
    if seat is not None:
        return content_seeds(session.identity, seat.key, seat.occurrence, client.n)
    return choice_seeds(session.identity, slot.index, client.n)


async def run(call: UpstreamCall, reader: Reader, presenter: Presenter,
              request: Request) -> Response:
    """Run the request in flight (``inflight.py``) until it ends: a non-streamed
    request's client that leaves stops it, and its upstream replies are closed on every
    path (answer, error, cancellation, bug) unless a stream response took them."""
    inflight = call.ctx.services.inflight
    recorder, observer = Recorder(call.ctx, call), Observer(call.ctx, call)
    answer = _respond(call, recorder, observer, reader, presenter)
    inflight.enter(call)
    try:
        if call.ctx.client.stream:
            return await answer
        return await unless_client_leaves(call, recorder, observer, answer, request.receive)
    finally:
        if not call.streaming:
            inflight.leave(call)
            await call.close()


async def _respond(call: UpstreamCall, recorder: Recorder, observer: Observer, reader: Reader,
                   presenter: Presenter) -> Response:
    """Send, read, present: a whole answer recorded before it is returned, or a stream.
    An upstream failure (or an answer the parse workers refused) not yet recorded is
    recorded with the body the client is shown."""
    try:
        requests = reader.requests()
        if requests:
            reader.opened(await call.send_all(requests))
        if call.ctx.client.stream:
            return StreamResponse(call, recorder, observer, reader, presenter.writer())
        answer, captured = await reader.whole()
        shown = answer if call.ctx.replayed else presenter.whole(answer)  # replayed: as recorded
        call.end()
        await recorder.record(200, shown, captured)
        content = shown if isinstance(shown, bytes) else orjson.dumps(shown)
        headers = observer.headers()
        observer.observe(200)
        return Response(content, headers=headers, media_type=reader.media_type)
    except ClientClosed:
        raise  # the departure watcher answers (and records) a client that left
    except SeedProxyError as exc:
        if isinstance(exc, _RECORDED) and not recorder.recording:
            call.end()
            await recorder.record(exc.status_code, presenter.errors.body(exc), Captured())
        headers = observer.headers()
        observer.observe(exc.status_code)
        return presenter.errors.response(exc, headers)


_REASON_CHARS = 40
_FIELD = re.compile(r"[a-z][a-z0-9_]*")
_DETAIL_CHARS = 500


def reason_of(exc: SeedProxyError) -> str:
    """The refusal's label (see the module docstring)."""
    for value in (exc.code, exc.param):
        if isinstance(value, str) and value:
            head = re.split(r"[.\[]", value, maxsplit=1)[0]
            return head if len(head) <= _REASON_CHARS and _FIELD.fullmatch(head) else "other"
    return exc.error_type

