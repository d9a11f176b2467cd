"""The transport below ``LeanClient``: HTTP/1.1 keep-alive over asyncio protocols,
plain or TLS, direct or through a forward proxy (``connection.Proxies``).

Invariants:
- a request holds a permit of its upstream (scheme, host, port) from asking for a
  connection until its body is read or closed, so one upstream whose connections all
  hang never holds up another; none free within the ``pool`` timeout is
  ``httpx.PoolTimeout``. Proxied requests take one of ``max_connections``, every other
  call one of ``max_control_connections``, so the control plane still reaches a server
  whose proxied requests hold every connection;
- a connection is reused only after its response was read to the end, both sides
  allowed keep-alive, and it sat idle (one of at most ``max_idle`` per upstream) under
  ``idle_expiry_s`` (below uvicorn's 5 s);
- a request is re-sent on a fresh connection only when provably harmless: an idle
  connection found closed is never written to, and a reused one that closes without
  answering a byte is retried only for an idempotent method; a POST that may have
  reached the server fails with ``httpx.RemoteProtocolError``;
- a body read whole (``UpstreamResponse.aread``) is at most ``max_body_bytes`` (after any
  content-encoding is undone), else ``UpstreamBodyTooLarge``.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass

import httpx

from .body import Body, UpstreamResponse
from .connection import Closed, Connection, Proxies, Route, route_for

__all__ = ["DEFAULT_MAX_BODY_BYTES", "FastTransport", "Timeouts", "request_bytes"]

DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
_SKIP_HEADERS = frozenset(
    {b"host", b"content-length", b"transfer-encoding", b"connection", b"proxy-authorization"}
)
_IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS", "TRACE"})


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Seconds (None: no bound) to connect, to wait for each read, and to wait for
    a free connection (``httpx.PoolTimeout``)."""

    connect: float | None
    read: float | None
    pool: float | None


class FastTransport:
    """Event-loop bound; raises ``httpx.TransportError``s (``LeanClient`` maps them).
    ``verify``: True (the system's and certifi's CAs), False, a CA bundle path, or an
    ``ssl.SSLContext``. ``proxies``: None reads the environment."""

    def __init__(
        self,
        *,
        max_connections: int = 1024,
        max_control_connections: int = 32,
        max_idle: int = 256,
        verify: bool | str | ssl.SSLContext = True,
        proxies: Proxies | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        idle_expiry_s: float = 4.0,
    ) -> None:
        self._idle: dict[tuple[str, str, int, str], list[Connection]] = {}
        self._max_idle = max_idle
        self._sizes = (max_control_connections, max_connections)
        self._limits: dict[tuple[str, str, int, bool], asyncio.Semaphore] = {}  # server, lane
        self._verify = verify
        self._ssl: ssl.SSLContext | None = None
        self.proxies = proxies if proxies is not None else Proxies.from_env()
        self.max_body_bytes = max_body_bytes
        self._idle_expiry_s = idle_expiry_s
        self._routes: dict[str, Route] = {}
        self._closed = False

    def route(self, url: str) -> Route:
        """The route to ``url`` (cached: one per URL)."""
        route = self._routes.get(url)
        if route is None:
            if len(self._routes) >= 4096:
                self._routes.clear()
            route = self._routes[url] = route_for(httpx.URL(url), self.proxies)
        return route

    async def send(
        self, route: Route, method: str, data: bytes, timeouts: Timeouts, *,
        proxied: bool, name: str,
    ) -> UpstreamResponse:
        """Send ``data``, a whole request (``request_bytes``), in the proxied requests'
        lane or the other one; ``name`` names the upstream in its body's errors."""
        if self._closed:
            raise httpx.ConnectError("the upstream client is closed")
        lane = (*route.server, proxied)
        limit = self._limits.get(lane)
        if limit is None:
            limit = self._limits[lane] = asyncio.Semaphore(self._sizes[proxied])
        await _acquire(limit, timeouts.pool)
        try:
            conn = self._take_idle(route.key, method)
            if conn is not None:
                try:
                    return await self._exchange(route, conn, data, timeouts, limit, name)
                except Closed:
                    if method not in _IDEMPOTENT:
                        raise httpx.RemoteProtocolError(
                            "upstream closed a reused connection without answering; "
                            f"a {method} that may have reached it is not sent again"
                        ) from None
            conn = await self._connect(route, timeouts.connect, method)
            try:
                return await self._exchange(route, conn, data, timeouts, limit, name)
            except Closed:
                raise httpx.RemoteProtocolError(
                    "upstream closed the connection without answering"
                ) from None
        except BaseException:
            limit.release()
            raise

    async def _exchange(self, route: Route, conn: Connection, data: bytes, timeouts: Timeouts,
                        limit: asyncio.Semaphore, name: str) -> UpstreamResponse:
        assert conn.transport is not None
        conn.transport.write(data)
        read_timeout = timeouts.read
        try:
            while not conn.head_done:
                if conn.error is not None:
                    error = conn.error
                    conn.close()
                    if isinstance(error, Closed):
                        raise error
                    raise httpx.ReadError(str(error))
                await conn.wait(read_timeout)
        except TimeoutError:
            conn.close()
            raise httpx.ReadTimeout("upstream read timed out") from None
        except asyncio.CancelledError:
            conn.close()
            raise
        release = functools.partial(self._release, route.key, conn, limit)
        body = Body(conn, name, read_timeout, self.max_body_bytes, release)
        return UpstreamResponse(conn.status, conn.headers, body)

    async def _connect(self, route: Route, timeout: float | None, method: str) -> Connection:
        loop = asyncio.get_running_loop()
        where = f"{route.connect_host}:{route.connect_port}"
        context = self._ssl_context() if route.tls_host is not None else None
        conn: Connection | None = None
        direct = route.tunnel is None
        try:
            async with asyncio.timeout(timeout):
                _, conn = await loop.create_connection(
                    lambda: Connection(loop), route.connect_host, route.connect_port,
                    ssl=context if direct else None,
                    server_hostname=route.tls_host if direct else None,
                )
                if route.tunnel is not None:
                    assert context is not None and conn.transport is not None
                    await conn.tunnel(route.tunnel)
                    tls = await loop.start_tls(
                        conn.transport, conn, context, server_hostname=route.tls_host
                    )
                    if tls is None:
                        raise httpx.ProxyError("TLS through the proxy's tunnel failed")
                    conn.transport = tls
        except (OSError, httpx.ProxyError) as exc:  # ssl.SSLError and TimeoutError are OSErrors
            if conn is not None:
                conn.close()
            if isinstance(exc, TimeoutError):
                raise httpx.ConnectTimeout(f"connecting to {where} timed out") from None
            if isinstance(exc, httpx.ProxyError):
                raise
            raise httpx.ConnectError(f"cannot connect to {where}: {exc}") from None
        conn.reset(expect_body=method != "HEAD")
        return conn

    def _ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            verify = self._verify
            if isinstance(verify, ssl.SSLContext):
                self._ssl = verify
                return verify
            # honours SSL_CERT_FILE / _DIR
            context = ssl.create_default_context(cafile=verify if isinstance(verify, str) else None)
            if verify is False:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            elif verify is True:
                import certifi  # comes with httpx

                context.load_verify_locations(certifi.where())
            self._ssl = context
        return self._ssl

    def _take_idle(self, key: tuple[str, str, int, str], method: str) -> Connection | None:
        idle = self._idle.get(key)
        if not idle:
            return None
        fresh_after = time.monotonic() - self._idle_expiry_s
        while idle:
            conn = idle.pop()
            closing = conn.transport is None or conn.transport.is_closing()
            if conn.closed or closing or conn.idle_since < fresh_after:
                conn.close()  # never written to: skipping it is always safe
                continue
            conn.reset(expect_body=method != "HEAD")
            return conn
        return None

    def _release(
        self, key: tuple[str, str, int, str], conn: Connection, limit: asyncio.Semaphore
    ) -> None:
        limit.release()
        if conn.reusable() and not self._closed:
            idle = self._idle.setdefault(key, [])
            if len(idle) < self._max_idle:
                conn.idle_since = time.monotonic()
                idle.append(conn)
                return
        conn.close()

    async def aclose(self) -> None:
        self._closed = True
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()


async def _acquire(limit: asyncio.Semaphore, timeout: float | None) -> None:
    if not limit.locked():
        await limit.acquire()
        return
    try:
        async with asyncio.timeout(timeout):
            await limit.acquire()
    except TimeoutError:
        raise httpx.PoolTimeout(
            f"no connection to this upstream came free within {timeout} s"
        ) from None


def request_bytes(route: Route, method: str, headers: Mapping[str, str], content: bytes) -> bytes:
    """The request as written: ``route``'s head, ``headers`` (but those the transport
    writes itself), a content-length where there is a body (or the method has one),
    and the body."""
    lines = [route.head(method)]
    for name, value in headers.items():
        raw = name.encode("ascii")
        if raw.lower() not in _SKIP_HEADERS:
            lines.append(b"%s: %s\r\n" % (raw, value.encode("ascii")))
    if content or method in ("POST", "PUT", "PATCH"):
        lines.append(b"content-length: %d\r\n" % len(content))
    lines.append(b"\r\n")
    lines.append(content)
    return b"".join(lines)
