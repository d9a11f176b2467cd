"""Server-sent events: the frames seedproxy and its engine write to a stream, and an
upstream's stream split back into events. A written frame's data is one line of compact
JSON, so no payload can break a frame. ``data_frame`` is an OpenAI chunk, ``typed_frame``
an event named by its payload's ``type`` (Anthropic Messages, OpenAI Responses)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson

from .errors import UpstreamBodyTooLarge

__all__ = ["DONE", "data_frame", "event_json", "split_events", "typed_frame"]

DONE = b"data: [DONE]\n\n"


def data_frame(payload: Any) -> bytes:
    """``data: JSON``."""
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def typed_frame(payload: dict[str, Any]) -> bytes:
    """``event: TYPE`` then ``data: JSON``, ``TYPE`` being ``payload["type"]``."""
    kind = str(payload["type"]).encode()
    return b"event: " + kind + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


async def split_events(chunks: AsyncIterator[bytes], max_event_bytes: int) -> AsyncIterator[bytes]:
    """Yield each event (ending in a blank line) the moment it is complete, never
    waiting for more than the current one; each byte is scanned for a boundary once.
    An event growing past ``max_event_bytes`` raises ``UpstreamBodyTooLarge`` (502)."""
    buffer = bytearray()
    carry_cr = False  # a chunk ended in "\r": its "\n" may open the next chunk
    async for chunk in chunks:
        if carry_cr:
            chunk = b"\r" + chunk
        carry_cr = chunk.endswith(b"\r")
        if carry_cr:
            chunk = chunk[:-1]
        if b"\r" in chunk:
            chunk = chunk.replace(b"\r\n", b"\n")
        scan = max(0, len(buffer) - 1)  # a boundary may straddle the old and new bytes
        buffer += chunk
        start = 0
        while True:
            end = buffer.find(b"\n\n", max(scan, start))
            if end < 0:
                break
            yield bytes(buffer[start : end + 2])
            start = end + 2
        if start:
            del buffer[:start]
        if len(buffer) > max_event_bytes:
            raise UpstreamBodyTooLarge(f"an upstream event grew past {max_event_bytes} bytes")
    if carry_cr:
        buffer += b"\r"
    if bytes(buffer).strip():
        yield bytes(buffer) + b"\n\n"


def event_json(event: bytes) -> Any:
    """Return the parsed JSON of an event's data lines; None for [DONE], non-JSON
    or comment-only events."""
    data = b"\n".join(
        line[5:].lstrip(b" ") for line in event.split(b"\n") if line.startswith(b"data:")
    )
    if not data or data == b"[DONE]":
        return None
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
