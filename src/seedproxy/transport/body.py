"""Upstream answers read from a ``Connection``: ``UpstreamResponse`` (an
``httpx.Response`` whose whole-body read is bounded and cheap) over a ``Body`` stream.

Invariant: a body read whole is at most its ``max_bytes`` (after any content-encoding
is undone), else ``UpstreamBodyTooLarge``; the connection is released exactly once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import httpx

from .connection import Connection

__all__ = ["Body", "UpstreamBodyTooLarge", "UpstreamResponse", "read_response"]


class UpstreamBodyTooLarge(httpx.RemoteProtocolError):
    """An upstream answer (or one event of it) over the configured byte bound."""


class UpstreamResponse(httpx.Response):
    """An ``httpx.Response`` whose ``aread`` is bounded by the transport's
    ``max_body_bytes`` and, without a content-encoding, hands the body over whole
    instead of through httpx's per-chunk decoding machinery."""

    body: bytes | None = None

    @property
    def content(self) -> bytes:
        if self.body is not None:
            return self.body
        return super().content

    async def aread(self) -> bytes:
        if self.body is not None:
            return self.body
        stream = self.stream
        if not isinstance(stream, Body):
            return await super().aread()
        limit = stream.limit
        if not any(name.lower() == b"content-encoding" for name, _ in stream.head):
            content = await stream.read_all(limit)
        else:  # decoded by httpx, and bounded after decoding (no decompression bomb)
            parts: list[bytes] = []
            size = 0
            try:
                async for part in self.aiter_bytes():
                    size += len(part)
                    if size > limit:
                        raise _too_large(limit, stream.request)
                    parts.append(part)
            finally:
                await self.aclose()
            content = b"".join(parts)
        self.body = content
        self.is_closed = True
        return content


class Body(httpx.AsyncByteStream):
    """One answer's body on ``conn``; ``release`` (called once, when it is read or
    closed) hands the connection back."""

    def __init__(
        self,
        conn: Connection,
        request: httpx.Request | None,
        timeout: float | None,
        max_bytes: int,
        release: Callable[[], None],
    ) -> None:
        self._conn, self._release = conn, release
        self.request, self._timeout = request, timeout
        self.limit = max_bytes
        self._done = False
        self.head = conn.headers
        """The response's header lines as received."""

    async def _next(self) -> bool:
        """Wait until the connection holds bytes (True) or the body ended (False)."""
        conn = self._conn
        while not conn.chunks:
            if conn.error is not None:
                raise httpx.ReadError(
                    str(conn.error) or "upstream connection lost", request=self.request
                )
            if conn.complete:
                return False
            try:
                await conn.wait(self._timeout)
            except TimeoutError:
                conn.close()
                raise httpx.ReadTimeout("upstream read timed out", request=self.request) from None
        return True

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while await self._next():
            yield self._conn.take()

    async def aclose(self) -> None:
        if self._done:
            return
        self._done = True
        self._release()

    async def read_all(self, limit: int) -> bytes:
        """The rest of the body (at most ``limit`` bytes, else ``UpstreamBodyTooLarge``),
        then the connection released: ``aiter`` + ``aclose`` without the generator."""
        conn = self._conn
        parts: list[bytes] = []
        size = 0
        try:
            declared = conn.content_length()
            if declared is not None and declared > limit:
                conn.close()
                raise _too_large(limit, self.request)
            while await self._next():
                part = conn.take()
                size += len(part)
                if size > limit:
                    conn.close()
                    raise _too_large(limit, self.request)
                parts.append(part)
        finally:
            await self.aclose()
        return parts[0] if len(parts) == 1 else b"".join(parts)


def _too_large(limit: int, request: httpx.Request | None) -> UpstreamBodyTooLarge:
    return UpstreamBodyTooLarge(f"upstream answer over {limit} bytes", request=request)


async def read_response(response: httpx.Response) -> bytes:
    """``response.aread()``: bounded and cheap for this transport's own answers."""
    return await response.aread()
