"""Serving /v1/responses through the upstream's chat route, with the derived seed.

Used when the backend's own Responses API drops ``seed`` (SGLang). The client's
Responses body is translated to a chat request, sent through the backend's usual
capture path (so token ids and logprobs are recorded), and the answer is translated
back. The interaction records the Responses request and the Responses object the
client received.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import orjson
from starlette.responses import Response

from ..backends import Captured, Endpoint
from ..backends.answer_shape import MalformedAnswer, check_answer
from ..backends.responses_bridge import to_response
from ..errors import UpstreamError
from .presentation import responses_presentation, translated_events
from .relay import RelayResponse
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
        present = responses_presentation(plan.client.body)
        writer = present.events()

        def snapshot() -> tuple[Any, Captured]:
            return writer.result(), tracker.result() if tracker is not None else Captured()

        record = StreamRecord(fwd, plan, snapshot)
        return RelayResponse(
            translated_events(
                fwd.timed(plan, reply.response.aiter_raw()), upstream=reply.upstream,
                max_event_bytes=fwd.settings.max_upstream_body_bytes, record=record,
                tracker=tracker, writer=writer, present=present,
            ),
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
