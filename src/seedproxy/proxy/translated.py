"""A request in another protocol (OpenAI Responses, Anthropic Messages) served through
the upstream's chat route with the derived seed, and shown to its client through the
request's ``Presentation``.

Used where the upstream cannot take the protocol with a seed (SGLang's Responses API
drops ``seed``; no upstream speaks Messages). The translated chat request goes through
the backend's usual capture path, so token ids and logprobs are recorded; the
interaction records the client's request and the answer the client received, in its
protocol. An upstream error is answered in OpenAI's shape (the caller reshapes it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson
from starlette.responses import Response

from ..backends import Captured, Endpoint
from .presentation import Presentation, translated_events
from .relay import RelayResponse
from .stream import StreamRecord

if TYPE_CHECKING:
    from .forward import Forwarder, Plan

__all__ = ["exchange_translated"]


async def exchange_translated(
    fwd: Forwarder, plan: Plan, chat: dict[str, Any], present: Presentation
) -> Response:
    """Send ``chat`` (the client's request translated) upstream; answer as ``present``."""
    reply = await fwd.call_upstream(plan, Endpoint.CHAT, dict(chat))
    if reply.response.status_code >= 400:
        return await fwd.upstream_error(plan, reply)
    headers = plan.headers()
    if plan.client.stream:
        headers["x-seedproxy-overhead-ms"] = f"{plan.overhead_ms():.3f}"
        headers["cache-control"] = "no-cache"
        tracker = fwd.backend.stream_capture(Endpoint.CHAT, chat) if plan.capture else None
        writer = present.events()

        def snapshot() -> tuple[Any, Captured]:
            return writer.result(), tracker.result() if tracker is not None else Captured()

        record = StreamRecord(fwd, plan, snapshot)
        events = translated_events(
            fwd.timed(plan, reply.response.aiter_raw()), upstream=reply.upstream,
            max_event_bytes=fwd.settings.max_upstream_body_bytes, record=record,
            tracker=tracker, writer=writer, present=present,
        )
        return RelayResponse(events, record, status_code=200, headers=headers,
                             media_type="text/event-stream")
    answer = await fwd.checked_answer(plan, reply, Endpoint.CHAT)
    captured = Captured()
    if plan.capture:
        answer, captured = fwd.backend.finish(Endpoint.CHAT, chat, answer)
    result = present.whole(answer)
    await fwd.record(plan, 200, result, captured)
    headers["x-seedproxy-overhead-ms"] = f"{plan.overhead_ms():.3f}"
    fwd.observe(plan, 200)
    return Response(orjson.dumps(result), headers=headers, media_type="application/json")
