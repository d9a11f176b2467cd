"""The one seam between the proxy and HTTP: ``UpstreamClient`` (pyreqwest underneath),
``UpstreamResponse``, and the one map from a transport failure to its status.

Invariants:
- every upstream request, proxied or not, goes through ``UpstreamClient``: no cookies,
  no redirects, HTTP/1.1 keep-alive (an idle connection is dropped after 4 s, below
  uvicorn's 5 s), the upstream key (``api_key``) and the proxy's hop mark on every
  request, the hop mark last so no header passed on replaces it;
- proxies come from ``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY`` and ``NO_PROXY`` (the
  lowercase spellings win); loopback upstreams (``localhost``, 127.0.0.0/8, ``::1``)
  always go direct; only ``http://`` proxies are accepted (``ConfigError``), and https
  upstreams go through them by CONNECT;
- a request holds a permit of its upstream server (scheme, host, port) from the moment
  it is sent until its body is read or closed: each server has ``max_connections`` for
  proxied requests and ``max_control_connections`` for all others, so one whose
  connections all hang holds up no other; a request that finds none free waits at most
  ``pool_timeout_s`` (``NoFreeConnection``);
- a body read whole is at most ``max_body_bytes`` (after any content-encoding is
  undone), else ``UpstreamBodyTooLarge``;
- the library's errors leave this module only as ``HTTPFailure``s, and
  ``upstream_failure`` is the one map from those to seedproxy's errors: 503
  ``NoConnection`` (no connection came free), 504 ``UpstreamTimeout`` (any other
  timeout), 502 ``UpstreamError`` past ``--max-upstream-body-bytes``, 503
  ``UpstreamUnavailable`` for a server that could not be reached, else 502.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import orjson
from pyreqwest.client import Client, ClientBuilder
from pyreqwest.exceptions import (
    BuilderError,
    ConnectError,
    PoolTimeoutError,
    RequestError,
    RequestTimeoutError,
)
from pyreqwest.proxy import ProxyBuilder
from pyreqwest.request import StreamRequest

from ..errors import ConfigError, UpstreamError, UpstreamTimeout, UpstreamUnavailable
from .loop import HOP_HEADER

__all__ = [
    "DEFAULT_MAX_BODY_BYTES", "HTTPFailure", "NoConnection", "UpstreamBodyTooLarge",
    "UpstreamClient", "UpstreamResponse", "upstream_failure",
]

DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
_LOOPBACK = "localhost,127.0.0.0/8,::1"
_LIBRARY_ERRORS = (RequestError, BuilderError)
_SETTLE_S = 0.05


class HTTPFailure(Exception):
    """An exchange with an upstream that failed below HTTP; ``cause`` names what failed
    (the library's error class)."""

    def __init__(self, message: str, cause: str | None = None) -> None:
        super().__init__(message)
        self.cause = cause or type(self).__name__


class ConnectFailed(HTTPFailure):
    """The server (or the proxy to it) could not be reached."""


class TimedOut(HTTPFailure):
    """A connect, a read or the whole request took longer than its timeout."""


class NoFreeConnection(TimedOut):
    """No connection to the server came free within the pool timeout."""


class UpstreamBodyTooLarge(HTTPFailure):
    """An upstream answer (or one event of it) over the configured byte bound."""


class NoConnection(UpstreamUnavailable):
    """503: no connection to the server came free within the pool timeout."""


def upstream_failure(url: str, what: str, exc: HTTPFailure) -> UpstreamError:
    """THE map from a transport failure to its status (see the module's invariants)."""
    if isinstance(exc, NoFreeConnection):
        return NoConnection(f"upstream {url}: {exc} (--max-upstream-connections)")
    if isinstance(exc, TimedOut):
        return UpstreamTimeout(f"upstream {url} timed out: {exc.cause}")
    if isinstance(exc, UpstreamBodyTooLarge):
        return UpstreamError(f"upstream {url}: {exc} (--max-upstream-body-bytes)")
    if isinstance(exc, ConnectFailed):
        return UpstreamUnavailable(f"upstream {url} {what}: {exc.cause}")
    return UpstreamError(f"upstream {url} {what}: {exc.cause}")


def _failure(exc: RequestError | BuilderError) -> HTTPFailure:
    kind = (NoFreeConnection if isinstance(exc, PoolTimeoutError) else
            TimedOut if isinstance(exc, RequestTimeoutError) else
            ConnectFailed if isinstance(exc, ConnectError) else HTTPFailure)
    causes = exc.details.get("causes") or []
    return kind(causes[-1]["message"] if causes else exc.message, type(exc).__name__)


class UpstreamResponse:
    """An upstream's answer: ``status_code``, ``headers`` (case-insensitive), and a body
    iterated once as it arrives (``async for``) or read whole (``aread``, bounded by
    ``max_bytes``). ``aclose`` ends it once, however often it is called, and then calls
    ``on_close`` with whether the body broke off while being read."""

    def __init__(self, status_code: int, headers: Mapping[str, str], *,
                 chunks: AsyncIterator[bytes] | None = None,
                 close: Callable[[], Awaitable[None]] | None = None,
                 content: bytes | None = None,
                 max_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
        self.status_code = status_code
        self.headers = headers
        self._chunks = chunks
        self._close = close
        self._body = content
        self._first: bytes | None = None
        self._max_bytes = max_bytes
        self._broken = False
        self._closed = False
        self.on_close: Callable[[bool], None] | None = None

    async def prime(self) -> None:
        """Read the first chunk now; iterating still yields it first."""
        if self._chunks is not None:
            self._first = await anext(self._chunks, None)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._body is not None:
            yield self._body
            return
        if self._first is not None:
            first, self._first = self._first, None
            yield first
        if self._chunks is None:
            return
        try:
            async for chunk in self._chunks:
                yield chunk
        except HTTPFailure:
            self._broken = True
            raise

    async def aread(self) -> bytes:
        """The whole body (then closed); ``UpstreamBodyTooLarge`` past ``max_bytes``."""
        if self._body is None:
            parts: list[bytes] = []
            size = 0
            try:
                async for chunk in self:
                    size += len(chunk)
                    if size > self._max_bytes:
                        raise UpstreamBodyTooLarge(
                            f"the answer is over {self._max_bytes} bytes")
                    parts.append(chunk)
            finally:
                await self.aclose()
            self._body = b"".join(parts)
        return self._body

    @property
    def content(self) -> bytes:
        """The body read by ``aread``."""
        if self._body is None:
            raise RuntimeError("the body is not read yet: await aread() first")
        return self._body

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        """The body as JSON; ``ValueError`` (orjson's) when it is not."""
        return orjson.loads(self.content)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self._close is not None:
                await self._close()
        finally:
            if self.on_close is not None:
                self.on_close(self._broken)


class UpstreamClient:
    """The proxy's HTTP client for its upstreams (see the module's invariants).
    Event-loop bound."""

    def __init__(self, *, read_timeout_s: float, connect_timeout_s: float,
                 max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, verify: bool | str = True,
                 environ: Mapping[str, str] | None = None, api_key: str | None = None,
                 max_connections: int = 1024, max_control_connections: int = 32,
                 pool_timeout_s: float = 5.0, hop: str | None = None) -> None:
        builder = (ClientBuilder().follow_redirects(False).no_proxy()
                   .read_timeout(timedelta(seconds=read_timeout_s))
                   .connect_timeout(timedelta(seconds=connect_timeout_s))
                   .pool_idle_timeout(timedelta(seconds=4)).pool_max_idle_per_host(256)
                   .http1_only())
        for proxy in _proxies(os.environ if environ is None else environ):
            builder = builder.proxy(proxy)
        if isinstance(verify, str):
            with open(verify, "rb") as bundle:
                builder = builder.add_root_certificate_pem(bundle.read())
        elif not verify:
            builder = builder.danger_accept_invalid_certs(True)
        if api_key:
            builder = builder.default_headers({"authorization": f"Bearer {api_key}"})
        self._builder = builder
        self._client: Client | None = None
        self._hop = {HOP_HEADER: hop} if hop is not None else {}
        self.max_body_bytes = max_body_bytes
        self._sizes = (max_control_connections, max_connections)
        self._pool_timeout_s = pool_timeout_s
        self._permits: dict[tuple[str, str, bool], asyncio.Semaphore] = {}

    async def send(self, url: str, content: bytes, headers: Mapping[str, str], *,
                   stream: bool) -> UpstreamResponse:
        """POST a proxied request; the answer's body is left unread. With ``stream``
        this returns once the head is in, and each chunk is handed on as it arrives;
        otherwise the body's first 64 KiB (all of most answers) come with the head."""
        return await self._send("POST", url, content, headers, None, proxied=True,
                                stream=stream)

    async def request(self, method: str, url: str, *, content: bytes | None = None,
                      json: Any = None, headers: Mapping[str, str] | None = None,
                      timeout: float | None = None) -> UpstreamResponse:
        """A small control-plane request (probes, server and weight routes, aborts),
        its body read whole; ``timeout`` bounds the whole of it."""
        if json is not None:
            content = orjson.dumps(json)
            headers = {"content-type": "application/json", **(headers or {})}
        response = await self._send(method, url, content, headers or {}, timeout,
                                    proxied=False, stream=False)
        await response.aread()
        return response

    async def get(self, url: str, *, timeout: float | None = None) -> UpstreamResponse:
        return await self.request("GET", url, timeout=timeout)

    async def post(self, url: str, *, json: Any, timeout: float | None = None
                   ) -> UpstreamResponse:
        return await self.request("POST", url, json=json, timeout=timeout)

    async def aclose(self) -> None:
        """Close every connection. pyreqwest finishes closing on a thread of its own
        after ``close()`` returns; the short wait lets it, so that an interpreter that
        exits next is not finalized under that thread (a fatal error at exit)."""
        if self._client is not None:
            await self._client.close()
            await asyncio.sleep(_SETTLE_S)

    async def __aenter__(self) -> UpstreamClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _send(self, method: str, url: str, content: bytes | None,
                    headers: Mapping[str, str], timeout: float | None, *,
                    proxied: bool, stream: bool) -> UpstreamResponse:
        if self._client is None:  # built inside the event loop that uses it
            self._client = self._builder.build()
        permit = await self._permit(url, proxied)
        sent: StreamRequest | None = None
        try:
            builder = self._client.request(method, url).headers({**headers, **self._hop})
            if stream:  # the head alone: no body awaited (each chunk then crosses threads)
                builder = builder.streamed_read_buffer_limit(0)
            if content is not None:
                builder = builder.body_bytes(content)
            if timeout is not None:
                builder = builder.timeout(timedelta(seconds=timeout))
            sent = builder.build_streamed()
            answer = await sent.__aenter__()
        except _LIBRARY_ERRORS as exc:
            permit.release()
            raise _failure(exc) from exc
        except BaseException:
            permit.release()
            raise
        request = sent

        async def close() -> None:
            try:
                await request.__aexit__(None, None, None)
            finally:
                permit.release()

        return UpstreamResponse(answer.status, answer.headers, chunks=_chunks(answer.body_reader),
                                close=close, max_bytes=self.max_body_bytes)

    async def _permit(self, url: str, proxied: bool) -> asyncio.Semaphore:
        parts = urlsplit(url)
        lane = (parts.scheme, parts.netloc, proxied)
        permit = self._permits.get(lane)
        if permit is None:
            permit = self._permits[lane] = asyncio.Semaphore(self._sizes[proxied])
        if not permit.locked():
            await permit.acquire()
            return permit
        try:
            async with asyncio.timeout(self._pool_timeout_s):
                await permit.acquire()
        except TimeoutError:
            raise NoFreeConnection(f"no connection to this upstream came free within "
                                   f"{self._pool_timeout_s} s", "PoolTimeout") from None
        return permit


async def _chunks(reader: Any) -> AsyncIterator[bytes]:
    while True:
        try:
            chunk = await reader.read_chunk()
        except _LIBRARY_ERRORS as exc:
            raise _failure(exc) from exc
        if chunk is None:
            return
        yield bytes(chunk)


def _proxies(env: Mapping[str, str]) -> list[ProxyBuilder]:
    """The forward proxies the environment names (see the module's invariants)."""

    def read(name: str) -> str:
        return (env.get(name.lower()) or env.get(name.upper()) or "").strip()

    fallback = read("all_proxy")
    bypass = ",".join(filter(None, (read("no_proxy"), _LOOPBACK)))
    found = []
    for scheme, value in (("http", read("http_proxy") or fallback),
                          ("https", read("https_proxy") or fallback)):
        if not value:
            continue
        url = value if "://" in value else "http://" + value
        if urlsplit(url).scheme != "http":
            raise ConfigError(f"proxy {value!r}: only http:// forward proxies are supported "
                              "(https upstreams go through them by CONNECT)")
        make = ProxyBuilder.http if scheme == "http" else ProxyBuilder.https
        found.append(make(url).no_proxy(bypass))
    return found
