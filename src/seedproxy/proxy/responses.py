"""Serving /v1/responses through the upstream's chat route, with the derived seed.

Used when the backend's own Responses API drops ``seed`` (SGLang). The client's
Responses body is translated to a chat request, sent through the backend's usual
capture path (so token ids and logprobs are recorded), and the answer is translated
back. The interaction records the Responses request and the Responses object the
client received.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import httpx
import orjson
from starlette.responses import Response

from ..backends import Captured, Endpoint
from ..backends.answer_shape import MalformedAnswer, check_answer, check_chunk
from ..backends.pool import UpstreamReply
from ..backends.responses_bridge import dumps, to_response
from ..backends.responses_events import ResponsesEvents
from ..errors import UpstreamError
from .relay import RelayResponse
from .sse import DONE, event_json, split_events
from .stream import StreamRecord

if TYPE_CHECKING:
    from .forward import Forwarder, Plan

__all__ = ["exchange_responses"]

log = logging.getLogger("seedproxy.request")


async def exchange_responses(fwd: Forwarder, plan: Plan, chat: dict[str, Any]) -> Response:
    """Answer a Responses request by way of ``chat`` (its translation), sent upstream."""
    client = plan.client
    reply = await fwd.call_upstream(plan, Endpoint.CHAT, dict(chat))
    if reply.response.status_code >= 400:
        return await fwd.upstream_error(plan, reply)
    if client.stream:
        headers = plan.headers()
        headers["x-seedproxy-overhead-ms"] = f"{plan.overhead_ms():.3f}"
        headers["cache-control"] = "no-cache"
        tracker = fwd.backend.stream_capture(Endpoint.CHAT, chat) if plan.capture else None
        writer = ResponsesEvents(plan.client.body)

        def snapshot() -> tuple[Any, Captured]:
            return writer.result(), tracker.result() if tracker is not None else Captured()

        record = StreamRecord(fwd, plan, snapshot)
        return RelayResponse(
            _events(reply, record, tracker, writer, fwd.timed(plan, reply.response.aiter_raw()),
                    fwd.settings.max_upstream_body_bytes),
            record,
            status_code=200,
            headers=headers,
            media_type="text/event-stream",
        )
    try:
        answer = orjson.loads(reply.response.content)
    except orjson.JSONDecodeError:
        no_json = UpstreamError(f"upstream {reply.upstream} returned invalid JSON")
        raise await fwd.reject_answer(plan, no_json) from None
    try:
        check_answer(Endpoint.CHAT, answer)
    except MalformedAnswer as exc:
        raise await fwd.reject_answer(plan, exc) from None
    captured = Captured()
    if plan.capture:
        answer, captured = fwd.backend.finish(Endpoint.CHAT, chat, answer)
    result = to_response(client.body, answer)
    await fwd.record(plan, 200, result, captured)
    headers = plan.headers()
    headers["x-seedproxy-overhead-ms"] = f"{plan.overhead_ms():.3f}"
    fwd.observe(plan, 200)
    return Response(orjson.dumps(result), headers=headers, media_type="application/json")


async def _events(
    reply: UpstreamReply,
    record: StreamRecord,
    tracker: Any,
    writer: ResponsesEvents,
    chunks: AsyncIterator[bytes],
    max_event_bytes: int,
) -> AsyncIterator[bytes]:
    """Translate chat chunks into Responses events; record before the closing ones."""
    try:
        async for event in split_events(chunks, max_event_bytes):
            if event.strip() == DONE.strip():
                break
            payload = event_json(event)
            if payload is None:
                continue
            check_chunk(Endpoint.CHAT, payload)
            shown = tracker.feed(payload) if tracker is not None else payload
            if shown is not None:
                for out in writer.feed(shown):
                    yield dumps(out)
        closing = writer.finish()
        unrecorded = await record.seal()  # recorded before the client sees the end
        if unrecorded is not None:
            yield b"event: error\ndata: " + orjson.dumps(unrecorded.body()) + b"\n\n"
            return
        for out in closing:
            yield dumps(out)
    except httpx.HTTPError as exc:
        record.status = 502
        log.warning("upstream %s broke off a stream: %s", reply.upstream, type(exc).__name__)
        yield b"event: error\ndata: " + orjson.dumps(
            UpstreamError(f"upstream {reply.upstream} broke off the stream").body()
        ) + b"\n\n"
    except MalformedAnswer as exc:
        record.status = exc.status_code
        log.warning("upstream %s sent a malformed chunk: %s", reply.upstream, exc.message)
        yield b"event: error\ndata: " + orjson.dumps(exc.body()) + b"\n\n"
    except Exception:
        record.status = 500  # seedproxy's own bug: recorded as such, and raised
        raise
