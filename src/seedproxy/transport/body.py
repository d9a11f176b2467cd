"""Upstream answers: ``UpstreamResponse`` (status, headers, and a body read once, whole
or in chunks) over a ``ByteStream``; ``Body`` is the transport's, one answer on a
``Connection``. ``prime`` hands on a streamed answer only once its first chunk was read
(so a server that dies before its first token is failed over).

Invariants: a body read whole is at most its ``max_bytes``, before and after any
content-encoding is undone (bounded output: no decompression bomb), else
``UpstreamBodyTooLarge``; the connection is released exactly once; a
transport failure while reading leaves ``Body`` mapped (``failure``): "failed while
answering" before its first chunk was handed on, "broke off the stream" after.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any, Protocol

import httpx
import orjson

from ..errors import UpstreamBodyTooLarge, UpstreamError
from .connection import Connection
from .failure import upstream_failure

__all__ = ["Body", "ByteStream", "Release", "UpstreamResponse", "prime"]

_DECODED = frozenset({b"gzip", b"x-gzip", b"deflate"})


def _inflate(content: bytes, limit: int, encoding: bytes) -> bytes:
    """``content`` inflated to at most ``limit`` bytes: gzip or zlib-wrapped deflate (told
    apart by their headers); a ``deflate`` body that is neither, as bare deflate."""
    try:
        return zlib.decompressobj(zlib.MAX_WBITS | 32).decompress(content, limit)
    except zlib.error:
        if encoding != b"deflate":
            raise
    return zlib.decompressobj(-zlib.MAX_WBITS).decompress(content, limit)


class ByteStream(Protocol):
    def __aiter__(self) -> AsyncIterator[bytes]: ...

    async def aclose(self) -> None: ...


class UpstreamResponse:
    """An upstream's answer. ``stream`` is read once: whole (``aread``, which closes
    it), or iterated and then closed (``aclose``); ``content`` is there once read."""

    def __init__(self, status_code: int, headers: httpx.Headers | list[tuple[bytes, bytes]],
                 stream: ByteStream | None = None, *, content: bytes | None = None) -> None:
        self.status_code = status_code
        self._headers = headers
        self.stream: ByteStream = stream if stream is not None else _empty()
        self._content = content
        self.is_closed = content is not None

    @property
    def headers(self) -> httpx.Headers:
        """Built when first asked for (many answers are passed on without a look)."""
        if not isinstance(self._headers, httpx.Headers):
            self._headers = httpx.Headers(self._headers)
        return self._headers

    @property
    def content(self) -> bytes:
        if self._content is None:
            raise RuntimeError("the upstream answer was not read (aread)")
        return self._content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        return orjson.loads(self.content)

    async def aread(self) -> bytes:
        if self._content is None:
            stream = self.stream
            try:
                if isinstance(stream, Body):
                    content = await stream.read_all()
                else:
                    content = b"".join([part async for part in stream])
            finally:
                await self.aclose()
            self._content = content
        return self._content

    def aiter_bytes(self) -> AsyncIterator[bytes]:
        return aiter(self.stream)

    async def aclose(self) -> None:
        self.is_closed = True
        await self.stream.aclose()


async def _empty() -> AsyncGenerator[bytes, None]:
    return
    yield


class Body:
    """One answer's body on ``conn`` from the upstream ``url``; ``release`` (called
    once, when it is read or closed) hands the connection back."""

    def __init__(self, conn: Connection, url: str, timeout: float | None, max_bytes: int,
                 release: Callable[[], None]) -> None:
        self._conn, self._release = conn, release
        self.url, self._timeout = url, timeout
        self.limit = max_bytes
        self._done = False
        self._head = conn.headers

    async def _next(self) -> bool:
        """Wait until the connection holds bytes (True) or the body ended (False)."""
        conn = self._conn
        while not conn.chunks:
            if conn.error is not None:
                raise httpx.ReadError(str(conn.error) or "upstream connection lost")
            if conn.complete:
                return False
            try:
                await conn.wait(self._timeout)
            except TimeoutError:
                conn.close()
                raise httpx.ReadTimeout("upstream read timed out") from None
        return True

    async def __aiter__(self) -> AsyncIterator[bytes]:
        what = "failed while answering"
        try:
            while await self._next():
                yield self._conn.take()
                what = "broke off the stream"
        except httpx.HTTPError as exc:
            raise upstream_failure(self.url, what, exc) from exc

    async def aclose(self) -> None:
        if self._done:
            return
        self._done = True
        self._release()

    async def read_all(self) -> bytes:
        """The rest of the body, decoded from its content-encoding (gzip, deflate); then
        the connection released."""
        conn = self._conn
        parts: list[bytes] = []
        size = 0
        try:
            declared = conn.content_length()
            if declared is not None and declared > self.limit:
                conn.close()
                raise self._too_large()
            while await self._next():
                part = conn.take()
                size += len(part)
                if size > self.limit:
                    conn.close()
                    raise self._too_large()
                parts.append(part)
        except httpx.HTTPError as exc:
            raise upstream_failure(self.url, "failed while answering", exc) from exc
        finally:
            await self.aclose()
        content = parts[0] if len(parts) == 1 else b"".join(parts)
        encoding = next((v.strip().lower() for n, v in self._head
                         if n.lower() == b"content-encoding"), None)
        if encoding not in _DECODED:
            return content
        try:
            decoded = _inflate(content, self.limit + 1, encoding)
        except zlib.error as exc:
            failure = httpx.DecodingError(str(exc))
            raise upstream_failure(self.url, "failed while answering", failure) from failure
        if len(decoded) > self.limit:
            raise self._too_large()
        return decoded

    def _too_large(self) -> UpstreamBodyTooLarge:
        return UpstreamBodyTooLarge(f"upstream {self.url}: upstream answer over {self.limit} bytes")


class Release:
    """Calls ``done(broken)`` once (an attempt's end), however often it is called."""

    def __init__(self, done: Callable[[bool], None]) -> None:
        self._done: Callable[[bool], None] | None = done

    def __call__(self, *, broken: bool) -> None:
        done, self._done = self._done, None
        if done is not None:
            done(broken)


async def prime(response: UpstreamResponse, release: Release) -> None:
    """Read the first chunk of a streamed body and put it back in front of the rest,
    so ``response.stream`` still yields everything. Raises ``UpstreamError``."""
    inner = response.stream
    rest = inner.__aiter__()
    try:
        first: bytes | None = await rest.__anext__()
    except StopAsyncIteration:
        first = None
    response.stream = _PrimedStream(first, rest, inner, release)


class _PrimedStream:
    def __init__(self, first: bytes | None, rest: AsyncIterator[bytes], inner: ByteStream,
                 release: Release) -> None:
        self._first = first
        self._rest = rest
        self._inner = inner
        self._release = release
        self._broken = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._first is not None:
            first, self._first = self._first, None
            yield first
        try:
            async for chunk in self._rest:
                yield chunk
        except UpstreamError:
            self._broken = True
            raise

    async def aclose(self) -> None:
        try:
            await self._inner.aclose()
        finally:
            self._release(broken=self._broken)
