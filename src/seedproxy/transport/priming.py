"""A streamed upstream answer whose first chunk was read before it is handed on (so
a server that dies before its first token is failed over), and the one-time release
of its attempt's ``inflight`` count."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Protocol

from ..errors import UpstreamError
from .body import ByteStream, UpstreamResponse

__all__ = ["Release", "prime"]


class Counted(Protocol):
    inflight: int


class Release:
    """Ends one attempt's ``inflight`` count exactly once; a broken stream is
    reported to ``on_broken``, and ``done`` is called after the count went down."""

    def __init__(self, upstream: Counted, on_broken: Callable[[], None], *,
                 done: Callable[[], None] | None = None) -> None:
        self._upstream = upstream
        self._on_broken = on_broken
        self._on_done = done
        self._done = False

    def __call__(self, *, broken: bool) -> None:
        if self._done:
            return
        self._done = True
        self._upstream.inflight -= 1
        if broken:
            self._on_broken()
        if self._on_done is not None:
            self._on_done()


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
