"""The request path: one client request -> one slot, its seeds, one upstream answer,
one recorded interaction.

Order matters and is the contract: the body is read and checked first (a 4xx here
consumes no index), then the slot is taken atomically (before any await on the
upstream), then the upstream is called. A request that reached the upstream keeps
its index whatever the answer, and its interaction is recorded before the client's
response completes.
"""

from __future__ import annotations

import logging
import time
from array import array
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from ..backends import Backend, Captured, Endpoint
from ..backends.answer_shape import MalformedAnswer, check_answer
from ..backends.base import UpstreamRequest
from ..backends.dispatch import Dispatch
from ..backends.pool import UpstreamPool, UpstreamReply
from ..backends.responses_bridge import to_chat
from ..errors import BadRequest, SeedProxyError, UpstreamError
from ..seeds import choice_seeds, client_choice_seeds, content_seeds
from ..sessions import Interaction, NewSession, SessionManager, SessionRecord, Slot
from ..settings import Settings
from .departure import unless_client_leaves
from .fanout import exchange_fanout
from .headers import is_sdk_retry, pinned_index, seedproxy_headers
from .inflight import InFlight
from .keying import ContentSeat, content_seat
from .metrics import Metrics
from .passthrough import relay_passthrough
from .presentation import Presentation, responses_presentation
from .request import ClientRequest, parse_body, read_body, request_digest
from .resume import ResumingSender
from .stream import CLIENT_CLOSED, UpstreamReplies
from .tito import exchange_tito, prepare_tito
from .translated import exchange_translated

if TYPE_CHECKING:
    from ..backends.tito import TitoMode

__all__ = ["Forwarder", "Plan"]

log = logging.getLogger("seedproxy.request")


@dataclass(slots=True)
class Plan:
    """What the proxy decided for one request before calling the upstream."""

    client: ClientRequest
    session: SessionRecord | None
    slot: Slot | None
    seeds: list[int]
    arrived: float
    upstream_s: float = 0.0
    upstream: str | None = None
    extra_headers: dict[str, str] = field(default_factory=dict)
    chat: dict[str, Any] | None = None
    """A Responses request's chat translation, when the upstream serves it as chat."""
    dispatch_weight_version: str | None = None
    present: Presentation | None = None
    """How token-in-token-out answers are shown when the client did not speak chat."""
    seat: ContentSeat | None = None
    """The content key and occurrence, in a content-keyed session."""
    replies: UpstreamReplies = field(default_factory=UpstreamReplies)
    """Every upstream answer opened for this request; see ``stream.py``."""
    dispatches: list[Dispatch] = field(default_factory=list)
    """Where each upstream request is running; see ``inflight.py``."""
    abandoned: bool = False
    """The client left before its (non-streamed) answer: the record says so."""
    recording: bool = False
    """A record of this request has begun (it is never cancelled from then on)."""

    @property
    def capture(self) -> bool:
        return self.session is not None

    @property
    def interaction_id(self) -> str:
        assert self.slot is not None
        return self.seat.interaction_id if self.seat is not None else self.slot.interaction_id

    def headers(self) -> dict[str, str]:
        return seedproxy_headers(
            self.session.session_id if self.session else None,
            self.slot.index if self.slot else None,
            self.seeds,
            self.upstream,
        )

    def overhead_ms(self) -> float:
        return max(0.0, (time.perf_counter() - self.arrived - self.upstream_s) * 1000)


class Forwarder:
    def __init__(
        self,
        *,
        settings: Settings,
        sessions: SessionManager,
        backend: Backend,
        pool: UpstreamPool,
        sender: ResumingSender,
        metrics: Metrics,
        inflight: InFlight,
        tito: TitoMode | None = None,
    ) -> None:
        self.tito = tito
        """Token-in-token-out mode: chat and Responses go through ``proxy/tito.py``."""
        self.inflight = inflight
        self.settings = settings
        self.sessions = sessions
        self.backend = backend
        self.pool = pool
        self.sender = sender
        self.metrics = metrics

    async def forward(
        self, request: Request, endpoint: Endpoint, session: SessionRecord | NewSession | None
    ) -> Response:
        arrived = time.perf_counter()
        request.state.seedproxy_arrived = arrived  # for the error handler's headers
        raw = await read_body(request, self.settings.max_body_bytes)
        client = parse_body(endpoint, raw)
        pinned = pinned_index(request.headers)
        # Translated before the slot is taken: an untranslatable body is a 400 using no index.
        chat = to_chat(client.body) if self._bridges_responses(endpoint) else None
        turn = None
        if self.tito is not None and endpoint in (Endpoint.CHAT, Endpoint.RESPONSES):
            if chat is None and endpoint is Endpoint.RESPONSES:
                chat = to_chat(client.body)
            turn = await prepare_tito(self, chat or client.body, session)  # a 4xx uses no index
        plan = await self.plan(client, session, pinned, is_sdk_retry(request.headers), arrived)
        plan.chat = chat
        if chat is not None:
            plan.present = responses_presentation(client.body)
        request.state.seedproxy_plan = plan
        if turn is not None:
            return await self.run(plan, exchange_tito(self, plan, turn), request)
        return await self.run(plan, self.exchange(plan), request)

    async def run(self, plan: Plan, exchange: Awaitable[Response], request: Request) -> Response:
        """Await ``exchange`` (every protocol's upstream exchange for ``plan``), in flight
        (``inflight.py``) until it ends: an error is observed, a non-streamed request's
        client that leaves stops it, and the plan's upstream replies are closed on every
        path (answer, error, cancellation, bug) unless a stream response took them."""
        self.inflight.enter(plan)
        try:
            if plan.client.stream:
                return await exchange
            return await unless_client_leaves(self, plan, exchange, request.receive)
        except SeedProxyError as exc:
            self.observe(plan, exc.status_code)
            raise
        finally:
            if not plan.replies.taken:
                self.inflight.leave(plan)
                await plan.replies.close()

    async def send(self, plan: Plan, request: UpstreamRequest) -> UpstreamReply:
        """Send one of ``plan``'s upstream requests: its reply is the plan's to close the
        moment it exists, and its dispatch can be stopped while it runs."""
        dispatch = Dispatch()
        plan.dispatches.append(dispatch)
        key = plan.session.session_id if plan.session else None
        return plan.replies.add(await self.sender.send(
            request, key=key, stream=plan.client.stream, dispatch=dispatch))

    def _bridges_responses(self, endpoint: Endpoint) -> bool:
        return endpoint is Endpoint.RESPONSES and not self.backend.seeds_responses

    async def plan(
        self,
        client: ClientRequest,
        session: SessionRecord | NewSession | None,
        pinned: int | None,
        retry: bool,
        arrived: float,
    ) -> Plan:
        """Check seed rules, create the session if new, then take the slot. Raises
        before any index is used (and, on a 4xx, before any session is created)."""
        deterministic = self.settings.deterministic
        fixed = client.seed
        if fixed is None and deterministic and session is not None:
            own = session.seed if isinstance(session, SessionRecord) else None
            fixed = own if own is not None else self.settings.seed
        configured = fixed is not None and client.seed is None
        if deterministic and client.n > 1 and configured and session is not None:
            raise BadRequest(
                f"a shared seed ({fixed}) with n={client.n} makes every choice identical; "
                "drop `seed` and let seedproxy derive one per choice",
                param="seed",
            )
        if session is None:
            return Plan(client, None, None, [client.seed] if client.seed is not None else [], arrived)
        if isinstance(session, NewSession):
            session = await self.sessions.get_or_create(session.session_id)
        digest = request_digest(client.endpoint, client.raw)
        slot = await self.sessions.store.allocate(
            session.session_id, digest=digest, retry=retry, pinned=pinned
        )
        seat = await content_seat(self.sessions.store, session, client, slot, pinned)
        if not deterministic:
            seeds = [client.seed] if client.seed is not None else []
        elif client.seed is not None and client.n > 1:
            seeds = client_choice_seeds(client.seed, client.n)
        elif fixed is not None:
            seeds = [fixed]
        elif seat is not None:
            seeds = content_seeds(session.identity, seat.key, seat.occurrence, client.n)
        else:
            seeds = choice_seeds(session.identity, slot.index, client.n)
        return Plan(client, session, slot, seeds, arrived, seat=seat)

    async def exchange(self, plan: Plan) -> Response:
        """Call the upstream for ``plan`` and answer the client."""
        if plan.chat is not None:
            assert plan.present is not None  # set with ``chat`` in ``forward``
            return await exchange_translated(self, plan, plan.chat, plan.present)
        if len(plan.seeds) > 1:
            return await exchange_fanout(self, plan)
        client = plan.client
        reply = await self.call_upstream(plan, client.endpoint, dict(client.body))
        if reply.response.status_code >= 400:
            return await self.upstream_error(plan, reply)
        if client.stream:
            return relay_passthrough(self, plan, reply)
        return await self._answer(plan, reply)

    async def call_upstream(
        self, plan: Plan, endpoint: Endpoint, body: dict[str, Any]
    ) -> UpstreamReply:
        """Send ``body`` (a private copy) to ``endpoint`` with the plan's seed. An upstream
        that never answered is recorded and raised; any answer fills in the plan."""
        inject = plan.seeds[0] if plan.seeds and self.settings.deterministic else None
        upstream_request = self.backend.prepare(endpoint, body, inject, capture=plan.capture)
        try:
            reply = await self.send(plan, upstream_request)
        except UpstreamError as exc:
            plan.upstream_s = time.perf_counter() - plan.arrived
            await self.record(plan, exc.status_code, exc.body(), Captured())
            raise
        plan.upstream = reply.upstream
        plan.dispatch_weight_version = reply.dispatch_weight_version
        plan.upstream_s = reply.waited_s
        if reply.failovers:
            self.metrics.failovers.inc(reply.failovers)
        return reply

    async def checked_answer(self, plan: Plan, reply: UpstreamReply, endpoint: Endpoint) -> Any:
        """``reply``'s whole JSON answer, checked to be one for ``endpoint``; an answer
        that is not is recorded and raised (502 naming what is wrong)."""
        try:
            answer = orjson.loads(reply.response.content)
        except orjson.JSONDecodeError:
            invalid = UpstreamError(f"upstream {reply.upstream} returned invalid JSON")
            raise await self.reject_answer(plan, invalid) from None
        try:
            check_answer(endpoint, answer)
        except MalformedAnswer as exc:
            raise await self.reject_answer(plan, exc) from None
        return answer

    async def reject_answer(self, plan: Plan, error: UpstreamError) -> UpstreamError:
        """Record an answer the proxy cannot use; return the error to raise."""
        await self.record(plan, error.status_code, error.body(), Captured())
        return error

    async def _answer(self, plan: Plan, reply: UpstreamReply) -> Response:
        """Answer a non-streaming request. Outside a session nothing is recorded, so the
        upstream's bytes pass through unparsed."""
        client = plan.client
        content = reply.response.content
        if plan.capture:
            answer = await self.checked_answer(plan, reply, client.endpoint)
            answer, captured = self.backend.finish(client.endpoint, client.body, answer)
            await self.record(plan, reply.response.status_code, answer, captured)
            content = orjson.dumps(answer)
        headers = plan.headers()
        headers["x-seedproxy-overhead-ms"] = f"{plan.overhead_ms():.3f}"
        self.observe(plan, reply.response.status_code)
        return Response(
            content,
            status_code=reply.response.status_code,
            headers=headers,
            media_type=reply.response.headers.get("content-type", "application/json"),
        )

    async def timed(self, plan: Plan, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """Yield upstream chunks, adding the time spent waiting for them to the plan."""
        iterator = chunks.__aiter__()
        while True:
            started = time.perf_counter()
            try:
                chunk = await iterator.__anext__()
            except StopAsyncIteration:
                plan.upstream_s += time.perf_counter() - started
                return
            plan.upstream_s += time.perf_counter() - started
            yield chunk

    async def upstream_error(self, plan: Plan, reply: UpstreamReply) -> Response:
        status = reply.response.status_code
        try:
            await reply.response.aread()
        finally:
            await reply.aclose()
        body = upstream_error_body(status, reply.response.content)
        await self.record(plan, status, body, Captured())
        headers = plan.headers()
        headers["x-seedproxy-overhead-ms"] = f"{plan.overhead_ms():.3f}"
        self.observe(plan, status)
        return Response(orjson.dumps(body), status, headers=headers, media_type="application/json")

    async def record(
        self, plan: Plan, status: int, response: Any, captured: Captured, *,
        abandoned: bool = False,
    ) -> None:
        if plan.session is None or plan.slot is None:
            return
        plan.recording = True
        if plan.abandoned:
            abandoned, status = True, CLIENT_CLOSED
        interaction = Interaction(
            interaction_id=plan.interaction_id,
            request_index=plan.slot.index,
            seeds=list(plan.seeds),
            endpoint=plan.client.endpoint.value,
            request=plan.client.body,
            response=response,
            status=status,
            prompt_token_ids=array("i", captured.prompt_token_ids),
            choices=captured.choices,
            latency_ms=round((time.perf_counter() - plan.arrived) * 1000, 3),
            upstream=plan.upstream,
            abandoned=abandoned,
            dispatch_weight_version=plan.dispatch_weight_version,
            tito=captured.lineage,
            content_key=plan.seat.key if plan.seat is not None else None,
            occurrence=plan.seat.occurrence if plan.seat is not None else None,
        )
        await self.sessions.store.record(plan.session.session_id, interaction)
        self.metrics.recorded_tokens.inc(interaction.token_count)

    def observe(self, plan: Plan, status: int) -> None:
        overhead_s = plan.overhead_ms() / 1000
        self.metrics.observe(plan.client.endpoint.value, status, plan.upstream, overhead_s, plan.upstream_s)
        if self.settings.log_requests and log.isEnabledFor(logging.INFO):
            # log.info() without findCaller's walk up the stack (the record says line 0).
            log.handle(log.makeRecord(
                log.name, logging.INFO, __file__, 0, "request", (), None, "observe",
                extra={
                    "session": plan.session.session_id if plan.session else None,
                    "index": plan.slot.index if plan.slot else None,
                    "seed": plan.seeds,
                    "upstream": plan.upstream,
                    "status": status,
                    "proxy_ms": round(overhead_s * 1000, 3),
                    "upstream_ms": round(plan.upstream_s * 1000, 3),
                },
            ))


def upstream_error_body(status: int, content: bytes) -> dict[str, Any]:
    """Re-shape an upstream error (SGLang's flat shape, OpenAI's, FastAPI's) into
    OpenAI's, keeping its message."""
    try:
        data = orjson.loads(content)
    except orjson.JSONDecodeError:
        data = None
    message = None
    error_type = "upstream_error"
    if isinstance(data, dict):
        inner: dict[str, Any] = data["error"] if isinstance(data.get("error"), dict) else data
        message = inner.get("message") or inner.get("detail")
        error_type = str(inner.get("type") or error_type)
    if not isinstance(message, str):
        message = content.decode("utf-8", "replace")[:2000] or f"upstream answered {status}"
    return {"error": {"message": message, "type": error_type, "param": None, "code": status}}

