"""One HTTP/1.1 connection to an upstream (or a forward proxy), parsed by httptools, as an
asyncio protocol; and the ``Route`` a request takes: direct, through a plain-HTTP forward
proxy (absolute-form target), or through a CONNECT tunnel (https behind a proxy).

Invariants: one response at a time, the final one: interim 1xx answers are skipped, at
most ``MAX_INTERIM`` per request (more is a protocol error), so a pooled connection never
holds an unread answer; ``received_any`` tells whether any byte came back since the last
request was written (the retry rule depends on it); reading pauses while more than
``HIGH_WATER`` bytes wait unread.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import ipaddress
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote

import httptools
import httpx

from ..errors import ConfigError

__all__ = ["Closed", "Connection", "HIGH_WATER", "MAX_INTERIM", "Proxies", "Route", "route_for"]

HIGH_WATER = 256 * 1024
MAX_INTERIM = 16
_MAX_TUNNEL_HEAD = 16 * 1024


class Closed(Exception):
    """The server closed the connection before answering a byte."""


class Connection(asyncio.Protocol):
    """One HTTP/1.1 connection, one response at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self.tunnel_head: bytearray | None = None  # while a CONNECT is pending
        self.reset(expect_body=True)

    def reset(self, *, expect_body: bool) -> None:
        """Ready for the next request (``expect_body`` is False for HEAD)."""
        self.parser = httptools.HttpResponseParser(self)
        self.expect_body = expect_body
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.head_done = False
        self.complete = False
        self.received_any = False
        self.keep_alive = False
        self.interim = 0
        self._in_interim = False
        self.error: BaseException | None = None
        self.chunks: collections.deque[bytes] = collections.deque()
        self.buffered = 0
        self.paused = False
        self.waiter: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no subclass
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.received_any = True
        if self.tunnel_head is not None:
            self.tunnel_head += data
            self._wake()
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            # A callback's own refusal reaches here wrapped (HttpParserCallbackError).
            cause = exc.__context__
            self.error = (cause if isinstance(cause, httpx.RemoteProtocolError)
                          else httpx.RemoteProtocolError(f"invalid HTTP from upstream: {exc}"))
            self.close()
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.complete and self.error is None:
            if self.head_done and not self._framed():
                self.complete = True  # a body delimited by the connection's end
            elif not self.received_any:
                self.error = Closed()
            else:
                self.error = httpx.RemoteProtocolError("upstream closed the connection mid-answer")
        self._wake()

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if 100 <= status < 200:  # interim: its (bodiless) message ends; the answer follows
            self.interim += 1
            self._in_interim = True
            self.headers = []
            if self.interim > MAX_INTERIM:
                raise httpx.RemoteProtocolError(
                    f"upstream sent over {MAX_INTERIM} interim (1xx) answers")
            return
        self.status = status
        self.head_done = True
        if not self.expect_body:  # a HEAD answer: no body, whatever its headers say
            self.complete = True

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)
        self.buffered += len(body)
        if self.buffered > HIGH_WATER and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def on_message_complete(self) -> None:
        if self._in_interim:
            self._in_interim = False
            return
        self.complete = True
        self.keep_alive = self.expect_body and self.parser.should_keep_alive()

    def _framed(self) -> bool:
        names = {name.lower() for name, _ in self.headers}
        return b"content-length" in names or b"transfer-encoding" in names

    def content_length(self) -> int | None:
        for name, value in self.headers:
            if name.lower() == b"content-length" and value.strip().isdigit():
                return int(value)
        return None

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

    async def tunnel(self, request: bytes) -> None:
        """Send a CONNECT ``request`` and wait for the proxy's 2xx; raises
        ``httpx.ProxyError`` for any other answer."""
        assert self.transport is not None
        self.tunnel_head = bytearray()
        self.transport.write(request)
        while b"\r\n\r\n" not in self.tunnel_head:
            if self.closed or len(self.tunnel_head) > _MAX_TUNNEL_HEAD:
                raise httpx.ProxyError("the proxy closed or garbled its answer to CONNECT")
            await self.wait(None)  # bounded by the connect timeout
        head, _, rest = bytes(self.tunnel_head).partition(b"\r\n\r\n")
        self.tunnel_head = None
        line = head.split(b"\r\n", 1)[0]
        status = line.split(b" ", 2)
        if len(status) < 2 or not status[1].startswith(b"2") or rest:
            raise httpx.ProxyError(f"the proxy refused the tunnel: {line.decode('latin-1')!r}")
        self.received_any = False

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


_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True, slots=True)
class Route:
    """Where the bytes of a request to one URL go, and the head that names it."""

    key: tuple[str, str, int, str]
    """The pool key: connections with equal keys are interchangeable."""
    connect_host: str
    connect_port: int
    tls_host: str | None
    """The server name to verify over TLS; None for plain HTTP."""
    tunnel: bytes | None
    """A whole CONNECT request to send before TLS, when tunnelling through a proxy."""
    prefix: bytes
    """The head after the method: target, version, Host, any Proxy-Authorization (CRLFs)."""
    server: tuple[str, str, int]
    """The upstream itself (scheme, host, port): each has a connection limit of its own."""

    def head(self, method: str) -> bytes:
        return method.encode("ascii") + b" " + self.prefix


@dataclass(frozen=True, slots=True)
class Proxies:
    """Forward proxies per upstream scheme (``http://`` only, else ``ConfigError``), and
    the hosts that bypass them: ``NO_PROXY`` entries are host names (``example.com``
    covers its subdomains; a leading ``.`` or ``*.`` means the same), IP addresses, CIDR
    blocks, ``host:port``, or ``*``. Loopback upstreams always go direct (a proxy on
    another host cannot reach this machine's loopback)."""

    http: httpx.URL | None = None
    https: httpx.URL | None = None
    no_proxy: tuple[str, ...] = ()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Proxies:
        env = os.environ if environ is None else environ

        def read(name: str) -> str:
            return (env.get(name.lower()) or env.get(name.upper()) or "").strip()

        fallback = read("all_proxy")
        return cls(
            http=_proxy_url(read("http_proxy") or fallback),
            https=_proxy_url(read("https_proxy") or fallback),
            no_proxy=tuple(e.strip().lower() for e in read("no_proxy").split(",") if e.strip()),
        )

    def for_url(self, url: httpx.URL) -> httpx.URL | None:
        """The proxy for ``url`` (None: direct)."""
        proxy = self.https if url.scheme == "https" else self.http
        if proxy is None or _is_loopback(url.host) or self._bypass(url):
            return None
        return proxy

    def _bypass(self, url: httpx.URL) -> bool:
        host = url.host.lower()
        port = url.port or _DEFAULT_PORTS.get(url.scheme, 0)
        entries = map(_split_port, self.no_proxy)
        return "*" in self.no_proxy or any(
            entry_port in (None, port) and _host_matches(host, entry_host)
            for entry_host, entry_port in entries)


def route_for(url: httpx.URL, proxies: Proxies) -> Route:
    """The route to ``url`` (an absolute http or https URL) under ``proxies``."""
    if url.scheme not in _DEFAULT_PORTS:
        raise httpx.UnsupportedProtocol(f"unsupported upstream URL scheme {url.scheme!r}")
    port = url.port or _DEFAULT_PORTS[url.scheme]
    host_header = url.netloc  # brackets an IPv6 address, omits a default port
    tls_host = url.host if url.scheme == "https" else None
    origin = b"%s HTTP/1.1\r\nhost: %s\r\n" % (url.raw_path, host_header)
    server = (url.scheme, url.host, port)
    proxy = proxies.for_url(url)
    if proxy is None:
        key = (url.scheme, url.host, port, "")
        return Route(key, url.host, port, tls_host, None, origin, server)
    proxy_port = proxy.port or 80
    auth = _proxy_authorization(proxy)
    authority = b"%s:%d" % (_bracketed(url.host), port)
    if url.scheme == "https":
        tunnel = b"CONNECT %s HTTP/1.1\r\nhost: %s\r\n%s\r\n" % (authority, authority, auth)
        key = ("https", url.host, port, str(proxy))
        return Route(key, proxy.host, proxy_port, tls_host, tunnel, origin, server)
    target = b"http://%s%s" % (host_header, url.raw_path)
    prefix = b"%s HTTP/1.1\r\nhost: %s\r\n%s" % (target, host_header, auth)
    key = ("http", proxy.host, proxy_port, "forward")
    return Route(key, proxy.host, proxy_port, None, None, prefix, server)


def _proxy_url(value: str) -> httpx.URL | None:
    if not value:
        return None
    url = httpx.URL(value if "://" in value else "http://" + value)
    if url.scheme != "http":
        raise ConfigError(
            f"proxy {value!r}: only http:// forward proxies are supported "
            "(https upstreams go through them by CONNECT)"
        )
    return url


def _proxy_authorization(proxy: httpx.URL) -> bytes:
    if not proxy.username:
        return b""
    pair = f"{unquote(proxy.username)}:{unquote(proxy.password or '')}".encode()
    return b"proxy-authorization: Basic " + base64.b64encode(pair) + b"\r\n"


def _bracketed(host: str) -> bytes:
    return f"[{host}]".encode() if ":" in host else host.encode("ascii")


def _split_port(entry: str) -> tuple[str, int | None]:
    if entry.startswith("["):  # [v6]:port or [v6]
        host, _, rest = entry[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") and rest[1:].isdigit() else None
    if entry.count(":") == 1:
        host, _, port = entry.partition(":")
        if port.isdigit():
            return host, int(port)
    return entry, None


def _host_matches(host: str, entry: str) -> bool:
    if "/" in entry:
        try:
            return ipaddress.ip_address(host) in ipaddress.ip_network(entry, strict=False)
        except ValueError:
            return False
    entry = entry.removeprefix("*").lstrip(".")
    return bool(entry) and (host == entry or host.endswith("." + entry))


def _is_loopback(host: str) -> bool:
    if host.lower() == "localhost" or host.lower().endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
