"""Server-sent events: split an upstream byte stream into events as they arrive."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson

__all__ = ["DONE", "encode_event", "event_json", "split_events"]

DONE = b"data: [DONE]\n\n"


async def split_events(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """Yield each complete event (ending in a blank line) the moment it is complete.

    Never waits for more than the current event: a chunk holding several events
    yields them all at once, a partial event waits only for its own end.
    """
    buffer = b""
    async for chunk in chunks:
        buffer += chunk.replace(b"\r\n", b"\n") if b"\r" in chunk else chunk
        while True:
            end = buffer.find(b"\n\n")
            if end < 0:
                break
            yield buffer[: end + 2]
            buffer = buffer[end + 2 :]
    if buffer.strip():
        yield buffer + b"\n\n"


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


def encode_event(payload: Any) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"
