"""The SSE splitter: events out as soon as they are whole, however the bytes are cut,
and an event that never ends is refused once it passes the bound."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from seedproxy.errors import UpstreamBodyTooLarge
from seedproxy.sse_frames import split_events

STREAM = b'data: {"a": 1}\r\n\r\ndata: 2\n\n: comment\r\n\r\ndata: [DONE]\r\n\r\n'
EVENTS = [b'data: {"a": 1}\n\n', b"data: 2\n\n", b": comment\n\n", b"data: [DONE]\n\n"]


async def _chunks(parts: list[bytes]) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def _split(parts: list[bytes], bound: int = 1 << 20) -> list[bytes]:
    return [event async for event in split_events(_chunks(parts), bound)]


@pytest.mark.parametrize("size", [1, 2, 3, 7, len(STREAM)])
async def test_events_are_the_same_however_the_bytes_are_cut(size: int) -> None:
    parts = [STREAM[i : i + size] for i in range(0, len(STREAM), size)]
    assert await _split(parts) == EVENTS


async def test_an_unterminated_last_event_is_still_delivered() -> None:
    assert await _split([b"data: 1\n\ndata: 2"]) == [b"data: 1\n\n", b"data: 2\n\n"]


async def test_an_event_past_the_bound_is_refused_while_smaller_ones_pass() -> None:
    small = b"data: " + b"y" * 900 + b"\n\n"
    assert await _split([small] * 50, bound=1024) == [small] * 50
    endless = [b"data: "] + [b"x" * 256] * 100
    with pytest.raises(UpstreamBodyTooLarge, match="past 1024 bytes"):
        await _split(endless, bound=1024)
