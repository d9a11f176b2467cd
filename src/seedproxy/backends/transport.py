"""A lean httpx transport for plain-HTTP upstreams: HTTP/1.1 keep-alive over asyncio
protocols, parsed by httptools (uvicorn's parser).

Why: httpcore's pool checks every pooled connection on every request (a poll per
connection), so the proxy's cost grew with the number of upstream connections; this
one takes an idle connection from a LIFO list in O(1). It plugs in below
``httpx.AsyncClient``, so the rest of the proxy and its tests keep using httpx.

Invariants: a connection is reused only after its response was read to the end and
both sides allowed keep-alive; a request on a reused connection that the server
had closed before answering a byte is retried once on a fresh connection; response
bytes are handed on as they arrive, with reading paused while too much is
buffered. HTTPS and anything else unusual goes to the ``fallback`` transport.
"""

from __future__ import annotations

import asyncio
import collections
import socket
from collections.abc import AsyncIterator
from typing import Any

import httptools
import httpx

__all__ = ["FastTransport", "read_response"]

_HIGH_WATER = 256 * 1024
_SKIP_HEADERS = frozenset({b"host", b"content-length", b"transfer-encoding", b"connection"})


class _Closed(Exception):
    """The server closed the connection before answering a byte."""


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection, one response at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._reset()

    def _reset(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.head_done = False
        self.complete = False
        self.received_any = False
        self.keep_alive = False
        self.error: BaseException | None = None
        self.chunks: collections.deque[bytes] = collections.deque()
        self.buffered = 0
        self.paused = False
        self.waiter: asyncio.Future[None] | None = None

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no subclass
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.received_any = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.error = httpx.RemoteProtocolError(f"invalid HTTP from upstream: {exc}")
            self.close()
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.complete and self.error is None:
            if self.head_done and not self._framed():
                self.complete = True  # a body delimited by the connection's end
            elif not self.received_any:
                self.error = _Closed()
            else:
                self.error = httpx.RemoteProtocolError("upstream closed the connection mid-answer")
        self._wake()

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.head_done = True

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)
        self.buffered += len(body)
        if self.buffered > _HIGH_WATER and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def on_message_complete(self) -> None:
        self.complete = True
        self.keep_alive = self.parser.should_keep_alive()

    # helpers
    def _framed(self) -> bool:
        names = {name.lower() for name, _ in self.headers}
        return b"content-length" in names or b"transfer-encoding" in names

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self, timeout: float | None) -> None:
        """Wait for the next event (bytes, the end, an error) or raise TimeoutError."""
        waiter = self.waiter = self.loop.create_future()
        timer = self.loop.call_later(timeout, _expire, waiter) if timeout is not None else None
        try:
            await waiter
        finally:
            self.waiter = None
            if timer is not None:
                timer.cancel()

    def take(self) -> bytes:
        data = b"".join(self.chunks) if len(self.chunks) != 1 else self.chunks[0]
        self.chunks.clear()
        self.buffered = 0
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        return data

    def reusable(self) -> bool:
        return self.complete and not self.closed and self.error is None and self.keep_alive

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
        self.closed = True


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


class _Body(httpx.AsyncByteStream):
    def __init__(
        self,
        transport: FastTransport,
        key: tuple[str, int],
        conn: _Connection,
        request: httpx.Request | None,
        timeout: float | None,
    ) -> None:
        self._transport, self._key, self._conn = transport, key, conn
        self._request, self._timeout = request, timeout
        self._done = False
        self.head = conn.headers
        """The response's header lines as received."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        conn = self._conn
        while True:
            if conn.chunks:
                yield conn.take()
                continue
            if conn.error is not None:
                raise httpx.ReadError(
                    str(conn.error) or "upstream connection lost", request=self._request
                )
            if conn.complete:
                return
            try:
                await conn.wait(self._timeout)
            except TimeoutError:
                conn.close()
                raise httpx.ReadTimeout("upstream read timed out", request=self._request) from None

    async def aclose(self) -> None:
        if self._done:
            return
        self._done = True
        self._transport._release(self._key, self._conn)

    async def read_all(self) -> bytes:
        """The rest of the body, then the connection released: ``aiter`` + ``aclose``
        without the generator."""
        conn = self._conn
        parts: list[bytes] = []
        try:
            while True:
                if conn.chunks:
                    parts.append(conn.take())
                elif conn.error is not None:
                    raise httpx.ReadError(
                        str(conn.error) or "upstream connection lost", request=self._request
                    )
                elif conn.complete:
                    break
                else:
                    try:
                        await conn.wait(self._timeout)
                    except TimeoutError:
                        conn.close()
                        raise httpx.ReadTimeout(
                            "upstream read timed out", request=self._request
                        ) from None
        finally:
            await self.aclose()
        return parts[0] if len(parts) == 1 else b"".join(parts)


class FastTransport(httpx.AsyncBaseTransport):
    """``httpx.AsyncClient(transport=FastTransport())``. Event-loop bound; keeps at most
    ``max_idle`` idle connections per upstream and opens at most ``max_connections``."""

    def __init__(
        self,
        *,
        max_connections: int = 1024,
        max_idle: int = 256,
        fallback: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._max_idle = max_idle
        self._limit = asyncio.Semaphore(max_connections)
        self._fallback = fallback
        self._closed = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme != "http" or request.method == "HEAD" or self._closed:
            return await self._fallback_transport().handle_async_request(request)
        timeouts = request.extensions.get("timeout", {})
        body = await request.aread()
        data = _head(request, url, len(body)) + body
        return await self._send((url.host, url.port or 80), data, request, timeouts)

    def takes(self, url: httpx.URL) -> bool:
        """Whether ``send_raw`` may carry a request to ``url``."""
        return url.scheme == "http" and not self._closed

    async def send_raw(
        self, url: httpx.URL, data: bytes, timeouts: dict[str, Any]
    ) -> httpx.Response:
        """Send ``data``, a whole HTTP/1.1 request (head and body) built by the caller,
        to ``url`` (``takes(url)`` must hold): ``handle_async_request`` without the
        ``httpx.Request`` around it. Errors carry no request."""
        return await self._send((url.host, url.port or 80), data, None, timeouts)

    async def _send(
        self,
        key: tuple[str, int],
        data: bytes,
        request: httpx.Request | None,
        timeouts: dict[str, Any],
    ) -> httpx.Response:
        await self._acquire(timeouts.get("pool"), request)
        try:
            conn = self._take_idle(key)
            try:
                if conn is not None:
                    try:
                        return await self._exchange(key, conn, data, request, timeouts)
                    except _Closed:
                        pass  # the server dropped an idle connection: retry on a fresh one
                conn = await self._connect(key, timeouts.get("connect"), request)
                return await self._exchange(key, conn, data, request, timeouts)
            except _Closed:
                raise httpx.RemoteProtocolError(
                    "upstream closed the connection without answering", request=request
                ) from None
        except BaseException:
            self._limit.release()
            raise

    async def _exchange(
        self,
        key: tuple[str, int],
        conn: _Connection,
        data: bytes,
        request: httpx.Request | None,
        timeouts: dict[str, Any],
    ) -> httpx.Response:
        assert conn.transport is not None
        conn.transport.write(data)
        read_timeout = timeouts.get("read")
        try:
            while not conn.head_done:
                if conn.error is not None:
                    error = conn.error
                    conn.close()
                    if isinstance(error, _Closed):
                        raise error
                    raise httpx.ReadError(str(error), request=request)
                await conn.wait(read_timeout)
        except TimeoutError:
            conn.close()
            raise httpx.ReadTimeout("upstream read timed out", request=request) from None
        except asyncio.CancelledError:
            conn.close()
            raise
        return httpx.Response(
            conn.status,
            headers=conn.headers,
            stream=_Body(self, key, conn, request, read_timeout),
            extensions={"http_version": b"HTTP/1.1"},
        )

    async def _connect(
        self, key: tuple[str, int], timeout: float | None, request: httpx.Request | None
    ) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                _, conn = await loop.create_connection(lambda: _Connection(loop), key[0], key[1])
        except TimeoutError:
            raise httpx.ConnectTimeout(
                f"connecting to {key[0]}:{key[1]} timed out", request=request
            ) from None
        except OSError as exc:
            raise httpx.ConnectError(
                f"cannot connect to {key[0]}:{key[1]}: {exc}", request=request
            ) from None
        return conn

    def _take_idle(self, key: tuple[str, int]) -> _Connection | None:
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            if not conn.closed:
                conn._reset()
                return conn
        return None

    def _release(self, key: tuple[str, int], conn: _Connection) -> None:
        self._limit.release()
        if conn.reusable() and not self._closed:
            idle = self._idle.setdefault(key, [])
            if len(idle) < self._max_idle:
                idle.append(conn)
                return
        conn.close()

    async def _acquire(self, timeout: float | None, request: httpx.Request | None) -> None:
        if not self._limit.locked():
            await self._limit.acquire()
            return
        try:
            async with asyncio.timeout(timeout):
                await self._limit.acquire()
        except TimeoutError:
            raise httpx.PoolTimeout("no upstream connection free", request=request) from None

    def _fallback_transport(self) -> httpx.AsyncBaseTransport:
        if self._fallback is None:
            self._fallback = httpx.AsyncHTTPTransport()
        return self._fallback

    async def aclose(self) -> None:
        self._closed = True
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()
        if self._fallback is not None:
            await self._fallback.aclose()


async def read_response(response: httpx.Response) -> bytes:
    """``response.aread()``, cheaper for this transport's own bodies: httpx's path runs
    the bytes through three async generators and a decoder, which only matters for a
    ``content-encoding``, and then this falls back to it."""
    stream = response.stream
    if (
        isinstance(stream, _Body)
        and not response.is_stream_consumed
        and not any(name.lower() == b"content-encoding" for name, _ in stream.head)
    ):
        response.is_stream_consumed = True
        content = await stream.read_all()
        response.is_closed = True
        response._content = content
        return content
    return await response.aread()


def _head(request: httpx.Request, url: httpx.URL, length: int) -> bytes:
    port = f":{url.port}" if url.port else ""
    lines = [
        b"%s %s HTTP/1.1\r\nhost: %s%s\r\n"
        % (request.method.encode(), url.raw_path, url.raw_host, port.encode())
    ]
    for name, value in request.headers.raw:
        if name.lower() not in _SKIP_HEADERS:
            lines.append(name + b": " + value + b"\r\n")
    if length or request.method in ("POST", "PUT", "PATCH"):
        lines.append(b"content-length: %d\r\n" % length)
    lines.append(b"\r\n")
    return b"".join(lines)
