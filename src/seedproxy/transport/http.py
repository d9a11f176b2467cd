"""The one seam between the proxy and HTTP: ``UpstreamClient`` (aiohttp underneath),
``UpstreamResponse``, and the one map from a transport failure to its status.

Invariants:
- every upstream request, proxied or not, goes through ``UpstreamClient``: no cookies,
  no redirects, HTTP/1.1 keep-alive (an idle connection is dropped after 4 s, below
  uvicorn's 5 s), the upstream key (``api_key``) and the proxy's hop mark on every
  request, the hop mark last so no header passed on replaces it;
- proxies come from ``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY`` and ``NO_PROXY`` (the
  lowercase spellings win); loopback upstreams (``localhost``, 127.0.0.0/8, ``::1``)
  always go direct, as do the hosts ``NO_PROXY`` names (a domain and its subdomains,
  an IP address or network, ``*`` for all); only ``http://`` proxies are accepted
  (``ConfigError``), and https upstreams go through them by CONNECT;
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
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from ipaddress import ip_address, ip_network
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson
from multidict import CIMultiDict
from yarl import URL

from ..errors import ConfigError, UpstreamError, UpstreamTimeout, UpstreamUnavailable
from .loop import HOP_HEADER

__all__ = [
    "DEFAULT_MAX_BODY_BYTES", "HTTPFailure", "NoConnection", "UpstreamBodyTooLarge",
    "UpstreamClient", "UpstreamResponse", "upstream_failure",
]

DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
_LOOPBACK = ("localhost", "127.0.0.0/8", "::1")
_LIBRARY_ERRORS = (aiohttp.ClientError, TimeoutError)
_Proxy = tuple[URL, aiohttp.BasicAuth | None]


class HTTPFailure(Exception):
    """An exchange with an upstream that failed below HTTP; ``cause`` names what failed
    (``ConnectError`` for a server not reached, else the library's error class)."""

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


def _failure(exc: aiohttp.ClientError | TimeoutError) -> HTTPFailure:
    if isinstance(exc, TimeoutError):
        return TimedOut(str(exc) or "no answer in time", type(exc).__name__)
    if isinstance(exc, aiohttp.ClientConnectorError | aiohttp.ClientHttpProxyError):
        return ConnectFailed(str(exc), "ConnectError")
    return HTTPFailure(str(exc) or type(exc).__name__, type(exc).__name__)


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
        env = os.environ if environ is None else environ
        self._proxies = _proxies(env)
        self._bypass = (*_LOOPBACK, *_names(env, "no_proxy").split(","))
        self._verify = verify
        self._timeout = aiohttp.ClientTimeout(sock_connect=connect_timeout_s,
                                              sock_read=read_timeout_s)
        self._key = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self._session: aiohttp.ClientSession | None = None
        self._hop = hop
        self.max_body_bytes = max_body_bytes
        self._sizes = (max_control_connections, max_connections)
        self._pool_timeout_s = pool_timeout_s
        self._permits: dict[tuple[str, str, bool], asyncio.Semaphore] = {}

    async def send(self, url: str, content: bytes, headers: Mapping[str, str], *,
                   stream: bool) -> UpstreamResponse:
        """POST a proxied request; this returns once the head is in, the body left
        unread. Its chunks are handed on as they arrive, whether ``stream`` (the answer
        is relayed as it comes) or not (it is read whole)."""
        return await self._send("POST", url, content, headers, None, proxied=True)

    async def request(self, method: str, url: str, *, content: bytes | None = None,
                      json: Any = None, headers: Mapping[str, str] | None = None,
                      timeout: float | None = None) -> UpstreamResponse:
        """A small control-plane request (probes, server and weight routes, aborts),
        its body read whole; ``timeout`` bounds the whole of it."""
        if json is not None:
            content = orjson.dumps(json)
            headers = {"content-type": "application/json", **(headers or {})}
        response = await self._send(method, url, content, headers or {}, timeout,
                                    proxied=False)
        await response.aread()
        return response

    async def get(self, url: str, *, timeout: float | None = None) -> UpstreamResponse:
        return await self.request("GET", url, timeout=timeout)

    async def post(self, url: str, *, json: Any, timeout: float | None = None
                   ) -> UpstreamResponse:
        return await self.request("POST", url, json=json, timeout=timeout)

    async def aclose(self) -> None:
        """Close every connection."""
        if self._session is not None:
            await self._session.close()

    async def __aenter__(self) -> UpstreamClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _send(self, method: str, url: str, content: bytes | None,
                    headers: Mapping[str, str], timeout: float | None, *,
                    proxied: bool) -> UpstreamResponse:
        session = self._open()
        sent = CIMultiDict(headers)
        if self._hop is not None:  # last, replacing any passed on
            sent.popall(HOP_HEADER, None)
            sent[HOP_HEADER] = self._hop
        timeouts = self._timeout if timeout is None else aiohttp.ClientTimeout(
            total=timeout, sock_connect=self._timeout.sock_connect,
            sock_read=self._timeout.sock_read)
        proxy, proxy_auth = self._proxy_for(url)
        permit = await self._permit(url, proxied)
        try:
            answer = await session.request(
                method, url, data=content, headers=sent, allow_redirects=False,
                timeout=timeouts, proxy=proxy, proxy_auth=proxy_auth)
        except _LIBRARY_ERRORS as exc:
            permit.release()
            raise _failure(exc) from exc
        except BaseException:
            permit.release()
            raise

        async def close() -> None:
            try:  # a body not read to its end closes its connection
                answer.release()
            finally:
                permit.release()

        return UpstreamResponse(answer.status, answer.headers, chunks=_chunks(answer),
                                close=close, max_bytes=self.max_body_bytes)

    def _open(self) -> aiohttp.ClientSession:
        """The session, made on first use inside the event loop that uses it."""
        if self._session is None:
            tls: ssl.SSLContext | bool = False
            if self._verify is not False:
                tls = ssl.create_default_context()
                if isinstance(self._verify, str):
                    tls.load_verify_locations(self._verify)
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=4, ssl=tls),
                cookie_jar=aiohttp.DummyCookieJar(), headers=self._key,
                timeout=self._timeout, skip_auto_headers=("User-Agent", "Content-Type"))
        return self._session

    def _proxy_for(self, url: str) -> _Proxy | tuple[None, None]:
        parts = urlsplit(url)
        proxy = self._proxies.get(parts.scheme)
        host = (parts.hostname or "").lower()
        if proxy is None or any(_matches(host, entry.strip().lower())
                                for entry in self._bypass):
            return None, None
        return proxy

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


async def _chunks(answer: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    try:
        async for chunk in answer.content.iter_any():
            yield chunk
    except _LIBRARY_ERRORS as exc:
        raise _failure(exc) from exc


def _names(env: Mapping[str, str], name: str) -> str:
    return (env.get(name.lower()) or env.get(name.upper()) or "").strip()


def _proxies(env: Mapping[str, str]) -> dict[str, _Proxy]:
    """The forward proxy of each upstream scheme (see the module's invariants)."""
    fallback = _names(env, "all_proxy")
    found = {}
    for scheme in ("http", "https"):
        value = _names(env, f"{scheme}_proxy") or fallback
        if not value:
            continue
        url = URL(value if "://" in value else "http://" + value)
        if url.scheme != "http":
            raise ConfigError(f"proxy {value!r}: only http:// forward proxies are supported "
                              "(https upstreams go through them by CONNECT)")
        found[scheme] = (url.with_user(None), aiohttp.BasicAuth.from_url(url))
    return found


def _matches(host: str, entry: str) -> bool:
    """Whether ``host`` is one ``NO_PROXY``'s ``entry`` names."""
    if entry == "*":
        return True
    try:
        return ip_address(host.strip("[]")) in ip_network(entry, strict=False)
    except ValueError:
        domain = entry.lstrip("*.")
        return bool(domain) and (host == domain or host.endswith("." + domain))
