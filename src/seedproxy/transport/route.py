"""How a request reaches an upstream URL: directly, through a plain-HTTP forward proxy
(absolute-form request target), or through a CONNECT tunnel (https behind a proxy).

Proxies come from ``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY`` and ``NO_PROXY`` (the
lowercase spellings win, as in curl). ``NO_PROXY`` entries are host names (``example.com``
also covers its subdomains; a leading dot or ``*.`` means the same), IP addresses,
CIDR blocks, ``host:port``, or ``*`` for everything. Loopback upstreams (``localhost``,
127.0.0.0/8, ``::1``) always go direct, as in Go's net/http: a proxy on another host
cannot reach this machine's loopback. Only ``http://`` proxies are supported; any
other scheme is refused with ``ConfigError`` when the client is built.
"""

from __future__ import annotations

import base64
import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote

import httpx

from ..errors import ConfigError

__all__ = ["Proxies", "Route", "route_for"]

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
    """The request head's first lines after the method: target, version, Host and any
    Proxy-Authorization, each ending in CRLF."""

    server: tuple[str, str, int]
    """The upstream itself (scheme, host, port), whatever carries its bytes: each has a
    connection limit of its own."""

    def head(self, method: str) -> bytes:
        return method.encode("ascii") + b" " + self.prefix


@dataclass(frozen=True, slots=True)
class Proxies:
    """Forward proxies per upstream scheme, and the hosts that bypass them."""

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
        """The proxy for ``url``, or None to go direct."""
        proxy = self.https if url.scheme == "https" else self.http
        if proxy is None or _is_loopback(url.host) or self._bypass(url):
            return None
        return proxy

    def _bypass(self, url: httpx.URL) -> bool:
        host = url.host.lower()
        port = url.port or _DEFAULT_PORTS.get(url.scheme, 0)
        for entry in self.no_proxy:
            if entry == "*":
                return True
            entry_host, entry_port = _split_port(entry)
            if entry_port is not None and entry_port != port:
                continue
            if _host_matches(host, entry_host):
                return True
        return False


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
