"""Passing an upstream's SSE stream through to the client (chat, completions,
``/generate``): events are forwarded as they arrive, captured on the way, and the
interaction is recorded before the terminal ``[DONE]`` (``StreamRecord``).

An upstream that breaks off or sends a malformed chunk ends the stream with an error
event in OpenAI's shape, recorded with the same status; seedproxy's own bug is
recorded as a 500 and raised.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import httpx
from starlette.responses import Response

from ..backends import Captured
from ..backends.answer_shape import MalformedAnswer, check_chunk
from ..backends.pool import UpstreamReply
from ..errors import UpstreamError, UpstreamTimeout
from .relay import RelayResponse
from .sse import DONE, encode_event, event_json, split_events
from .stream import StreamRecord
from .transcript import StreamTranscript

if TYPE_CHECKING:
    from .forward import Forwarder, Plan

__all__ = ["relay_passthrough"]

log = logging.getLogger("seedproxy.request")


def relay_passthrough(fwd: Forwarder, plan: Plan, reply: UpstreamReply) -> Response:
    """The client's stream: the upstream's events as they come, captured on the way."""
    headers = plan.headers()
    headers["x-seedproxy-overhead-ms"] = f"{plan.overhead_ms():.3f}"
    headers["cache-control"] = "no-cache"
    client = plan.client
    capture = plan.capture
    tracker = fwd.backend.stream_capture(client.endpoint, client.body) if capture else None
    transcript = StreamTranscript(client.endpoint)

    def snapshot() -> tuple[Any, Captured]:
        return transcript.result(), tracker.result() if tracker is not None else Captured()

    record = StreamRecord(fwd, plan, snapshot)
    return RelayResponse(
        _events(fwd, plan, reply, record, tracker, transcript),
        record,
        status_code=reply.response.status_code,
        headers=headers,
        media_type=reply.response.headers.get("content-type", "text/event-stream"),
    )


async def _events(
    fwd: Forwarder,
    plan: Plan,
    reply: UpstreamReply,
    record: StreamRecord,
    tracker: Any,
    transcript: StreamTranscript,
) -> AsyncIterator[bytes]:
    """Forward events as they arrive; capture on the way; record before [DONE]."""
    record.status = reply.response.status_code
    # The stream itself rather than aiter_raw(): the same chunks, without httpx's
    # chunker and bookkeeping per chunk; the record closes the response.
    chunks = aiter(reply.response.stream)  # type: ignore[arg-type]
    try:
        async for event in split_events(
            fwd.timed(plan, chunks), fwd.settings.max_upstream_body_bytes
        ):
            payload = event_json(event) if plan.capture else None
            if payload is None:
                if event.strip() == DONE.strip():
                    unrecorded = await record.seal()
                    if unrecorded is not None:
                        yield encode_event(unrecorded.body())
                        return
                yield event
                continue
            assert tracker is not None
            check_chunk(plan.client.endpoint, payload)
            shown = tracker.feed(payload)
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
        record.status = error.status_code
        yield encode_event(error.body())
    except MalformedAnswer as exc:
        log.warning("upstream %s sent a malformed chunk: %s", reply.upstream, exc.message)
        record.status = exc.status_code
        yield encode_event(exc.body())
    except Exception:
        record.status = 500  # seedproxy's own bug: recorded as such, and raised
        raise
