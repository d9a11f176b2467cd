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
from starlette.responses import Response, StreamingResponse

from ..backends import Captured, Endpoint
from ..backends.pool import UpstreamReply
from ..backends.responses_bridge import dumps, to_response
from ..backends.responses_events import ResponsesEvents
from ..errors import StoreError, UpstreamError
from .malformed import SHAPE_ERRORS, malformed_answer
from .sse import DONE, event_json, split_events

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
        return StreamingResponse(
            _events(fwd, plan, chat, reply), headers=headers, media_type="text/event-stream"
        )
    try:
        answer = orjson.loads(reply.response.content)
    except orjson.JSONDecodeError:
        answer = None
    if not isinstance(answer, dict):
        no_object = UpstreamError(f"upstream {reply.upstream} returned no JSON object")
        raise await fwd.reject_answer(plan, no_object)
    captured = Captured()
    try:
        if plan.capture:
            answer, captured = fwd.backend.finish(Endpoint.CHAT, chat, answer)
        result = to_response(client.body, answer)
    except SHAPE_ERRORS:
        raise await fwd.reject_answer(plan, malformed_answer(reply.upstream)) from None
    await fwd.record(plan, 200, result, captured)
    headers = plan.headers()
    headers["x-seedproxy-overhead-ms"] = f"{plan.overhead_ms():.3f}"
    fwd.observe(plan, 200)
    return Response(orjson.dumps(result), headers=headers, media_type="application/json")


async def _events(
    fwd: Forwarder, plan: Plan, chat: dict[str, Any], reply: UpstreamReply
) -> AsyncIterator[bytes]:
    tracker = fwd.backend.stream_capture(Endpoint.CHAT, chat) if plan.capture else None
    writer = ResponsesEvents(plan.client.body)
    status = 200
    finished = False
    try:
        async for event in split_events(fwd.timed(plan, reply.response.aiter_raw())):
            if event.strip() == DONE.strip():
                break
            payload = event_json(event)
            if not isinstance(payload, dict):
                continue
            shown = tracker.feed(payload) if tracker is not None else payload
            if shown is not None:
                for out in writer.feed(shown):
                    yield dumps(out)
        closing = writer.finish()
        finished = True
        if plan.capture:  # recorded before the client sees the end
            try:
                await _record(fwd, plan, status, writer, tracker)
            except StoreError as exc:  # told, not cut off (and not retried as a 200)
                status = exc.status_code
                yield b"event: error\ndata: " + orjson.dumps(exc.body()) + b"\n\n"
                return
        for out in closing:
            yield dumps(out)
    except httpx.HTTPError as exc:
        status = 502
        log.warning("upstream %s broke off a stream: %s", reply.upstream, type(exc).__name__)
        yield b"event: error\ndata: " + orjson.dumps(
            UpstreamError(f"upstream {reply.upstream} broke off the stream").body()
        ) + b"\n\n"
    except SHAPE_ERRORS:
        status = 502
        yield b"event: error\ndata: " + orjson.dumps(malformed_answer(reply.upstream).body()) + b"\n\n"
    finally:
        await reply.aclose()
        if plan.capture and not finished:
            await _record(fwd, plan, status, writer, tracker)
        fwd.observe(plan, status)


async def _record(
    fwd: Forwarder, plan: Plan, status: int, writer: ResponsesEvents, tracker: Any
) -> None:
    captured = tracker.result() if tracker is not None else Captured()
    await fwd.record(plan, status, writer.result(), captured)
