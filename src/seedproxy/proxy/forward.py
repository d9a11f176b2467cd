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
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
from starlette.requests import Request
from starlette.responses import Response

from ..backends import Backend, Captured, Endpoint
from ..backends.pool import UpstreamPool, UpstreamReply
from ..backends.responses_bridge import to_chat
from ..errors import BadRequest, SeedProxyError, UpstreamError, UpstreamTimeout
from ..seeds import choice_seeds, content_seeds
from ..sessions import Interaction, SessionManager, SessionRecord, Slot
from ..settings import Settings
from .fanout import exchange_fanout
from .headers import is_sdk_retry, pinned_index, seedproxy_headers
from .keying import ContentSeat, content_seat
from .malformed import SHAPE_ERRORS, malformed_answer
from .metrics import Metrics
from .relay import RelayResponse
from .request import ClientRequest, parse_body, read_body, request_digest
from .responses import exchange_responses
from .sse import DONE, encode_event, event_json, split_events
from .transcript import StreamTranscript

__all__ = ["Forwarder", "Plan"]

log = logging.getLogger("seedproxy.request")

CLIENT_CLOSED = 499
"""Status recorded for a stream whose client left before it began (nginx's code)."""


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
    seat: ContentSeat | None = None
    """The content key and occurrence, in a content-keyed session."""
    streamed: bool = False
    """Set once the relay began (or gave up on) the stream; guards the one record."""
    """A Responses request's chat translation, when the upstream serves it as chat."""

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
        metrics: Metrics,
    ) -> None:
        self.settings = settings
        self.sessions = sessions
        self.backend = backend
        self.pool = pool
        self.metrics = metrics

    async def forward(
        self, request: Request, endpoint: Endpoint, session: SessionRecord | None
    ) -> Response:
        arrived = time.perf_counter()
        request.state.seedproxy_arrived = arrived  # for the error handler's headers
        raw = await read_body(request, self.settings.max_body_bytes)
        client = parse_body(endpoint, raw)
        pinned = pinned_index(request.headers)
        # Translated before the slot is taken: an untranslatable body is a 400 using no index.
        chat = to_chat(client.body) if self._bridges_responses(endpoint) else None
        plan = await self.plan(client, session, pinned, is_sdk_retry(request.headers), arrived)
        plan.chat = chat
        request.state.seedproxy_plan = plan
        try:
            return await self.exchange(plan)
        except SeedProxyError as exc:
            self.observe(plan, exc.status_code)
            raise

    def _bridges_responses(self, endpoint: Endpoint) -> bool:
        return endpoint is Endpoint.RESPONSES and not self.backend.seeds_responses

    async def plan(
        self,
        client: ClientRequest,
        session: SessionRecord | None,
        pinned: int | None,
        retry: bool,
        arrived: float,
    ) -> Plan:
        """Check seed rules, then take the slot. Raises before any index is used."""
        deterministic = self.settings.deterministic
        fixed = client.seed
        if fixed is None and deterministic and session is not None:
            fixed = session.seed if session.seed is not None else self.settings.seed
        if deterministic and client.n > 1 and fixed is not None and session is not None:
            raise BadRequest(
                f"a shared seed ({fixed}) with n={client.n} makes every choice identical; "
                "drop `seed` and let seedproxy derive one per choice",
                param="seed",
            )
        if session is None:
            return Plan(client, None, None, [client.seed] if client.seed is not None else [], arrived)
        digest = request_digest(client.endpoint, client.raw)
        slot = await self.sessions.store.allocate(
            session.session_id, digest=digest, retry=retry, pinned=pinned
        )
        seat = await content_seat(self.sessions.store, session, client, slot, pinned)
        if not deterministic:
            seeds = [client.seed] if client.seed is not None else []
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
            return await exchange_responses(self, plan, plan.chat)
        if len(plan.seeds) > 1:
            return await exchange_fanout(self, plan)
        client = plan.client
        reply = await self.call_upstream(plan, client.endpoint, dict(client.body))
        if reply.response.status_code >= 400:
            return await self.upstream_error(plan, reply)
        if client.stream:
            return self._relay(plan, reply)
        return await self._answer(plan, reply)

    async def call_upstream(
        self, plan: Plan, endpoint: Endpoint, body: dict[str, Any]
    ) -> UpstreamReply:
        """Send ``body`` (a private copy) to ``endpoint`` with the plan's seed. An upstream
        that never answered is recorded and raised; any answer fills in the plan."""
        inject = plan.seeds[0] if plan.seeds and self.settings.deterministic else None
        upstream_request = self.backend.prepare(endpoint, body, inject, capture=plan.capture)
        key = plan.session.session_id if plan.session else None
        try:
            reply = await self.pool.send(upstream_request, key=key, stream=plan.client.stream)
        except UpstreamError as exc:
            plan.upstream_s = time.perf_counter() - plan.arrived
            await self.record(plan, exc.status_code, exc.body(), Captured())
            raise
        plan.upstream = reply.upstream
        plan.upstream_s = reply.waited_s
        if reply.failovers:
            self.metrics.failovers.inc(reply.failovers)
        return reply

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
            try:
                answer = orjson.loads(content)
            except orjson.JSONDecodeError:
                invalid = UpstreamError(f"upstream {reply.upstream} returned invalid JSON")
                raise await self.reject_answer(plan, invalid) from None
            try:
                answer, captured = self.backend.finish(client.endpoint, client.body, answer)
            except SHAPE_ERRORS:
                raise await self.reject_answer(plan, malformed_answer(reply.upstream)) from None
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

    def _relay(self, plan: Plan, reply: UpstreamReply) -> Response:
        headers = plan.headers()
        headers["x-seedproxy-overhead-ms"] = f"{plan.overhead_ms():.3f}"
        headers["cache-control"] = "no-cache"

        async def abandoned() -> None:
            """The client left before the stream began: close the upstream, keep the record."""
            if not plan.streamed:
                plan.streamed = True
                await reply.aclose()
                await self.record(plan, CLIENT_CLOSED, None, Captured())
                self.observe(plan, CLIENT_CLOSED)

        return RelayResponse(
            self._events(plan, reply),
            on_close=abandoned,
            status_code=reply.response.status_code,
            headers=headers,
            media_type=reply.response.headers.get("content-type", "text/event-stream"),
        )

    async def _events(self, plan: Plan, reply: UpstreamReply) -> AsyncIterator[bytes]:
        """Forward events as they arrive; capture on the way; record before [DONE]."""
        plan.streamed = True
        client = plan.client
        tracker = self.backend.stream_capture(client.endpoint, client.body) if plan.capture else None
        transcript = StreamTranscript(client.endpoint)
        status = reply.response.status_code
        recorded = False
        # The stream itself rather than aiter_raw(): the same chunks, without httpx's
        # chunker and bookkeeping per chunk; the ``finally`` below closes the response.
        chunks = aiter(reply.response.stream)  # type: ignore[arg-type]
        try:
            async for event in split_events(self.timed(plan, chunks)):
                payload = event_json(event) if plan.capture else None
                if payload is None:
                    if event.strip() == DONE.strip() and plan.capture:
                        await self._record_stream(plan, status, transcript, tracker)
                        recorded = True
                    yield event
                    continue
                assert tracker is not None
                try:
                    shown = tracker.feed(payload)
                except SHAPE_ERRORS:  # pass an event we cannot read through as sent
                    yield event
                    continue
                if shown is not None:
                    transcript.add(shown)
                    yield encode_event(shown)
        except httpx.HTTPError as exc:
            log.warning("upstream %s broke off a stream: %s", reply.upstream, type(exc).__name__)
            error = (
                UpstreamTimeout(f"upstream {reply.upstream} timed out mid-stream")
                if isinstance(exc, httpx.TimeoutException)
                else UpstreamError(f"upstream {reply.upstream} broke off the stream")
            )
            status = error.status_code
            yield encode_event(error.body())
        finally:
            await reply.aclose()
            if plan.capture and not recorded:
                await self._record_stream(plan, status, transcript, tracker)
            self.observe(plan, status)

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

    async def _record_stream(
        self, plan: Plan, status: int, transcript: StreamTranscript, tracker: Any
    ) -> None:
        captured = tracker.result() if tracker is not None else Captured()
        await self.record(plan, status, transcript.result(), captured)

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

    async def record(self, plan: Plan, status: int, response: Any, captured: Captured) -> None:
        if plan.session is None or plan.slot is None:
            return
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

