"""The HTTP client the proxy talks to its upstreams with.

``LeanClient`` is an ``httpx.AsyncClient`` cut down to what a proxy needs: a request
goes straight to the transport, with no cookie jar (an upstream's cookies must never
reach another client's request), no redirects, auth, event hooks or default headers,
and upstream URLs parsed once. Anything it does not cover (params, json, files,
non-string URLs) takes httpx's ordinary path. Every request, http or https, goes
through the one ``FastTransport`` with the client's timeouts and TLS settings, and
carries the upstream key (``api_key``) when one is set, and the proxy's hop mark
(``hop``, ``loop.py``): proxied requests, probes and the fleet's control calls alike.
"""

from __future__ import annotations

import ssl
from typing import Any

import httpx

from .fast import _SKIP_HEADERS, DEFAULT_MAX_BODY_BYTES, FastTransport
from .loop import HOP_HEADER
from .route import Proxies

__all__ = ["LeanClient", "upstream_client"]

_URL_CACHE = 4096


class LeanClient(httpx.AsyncClient):
    def __init__(self, *, timeout: httpx.Timeout, transport: httpx.AsyncBaseTransport,
                 api_key: str | None = None, hop: str | None = None) -> None:
        # trust_env=False: the transport reads the proxy variables itself; httpx's own
        # proxy mounts would never be used (``send`` goes straight to the transport).
        super().__init__(
            timeout=timeout, transport=transport, follow_redirects=False, trust_env=False
        )
        self._lean_transport = transport
        self._default_timeout = self.timeout.as_dict()
        self._urls: dict[str, httpx.URL] = {}
        self._key_header = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self._hop = {HOP_HEADER: hop} if hop is not None else {}
        """Sent last, so no header passed on from a client replaces it."""

    def build_request(  # type: ignore[override]
        self,
        method: str,
        url: httpx.URL | str,
        *,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
        timeout: Any = httpx.USE_CLIENT_DEFAULT,
        extensions: dict[str, Any] | None = None,
        **other: Any,
    ) -> httpx.Request:
        if self._key_header or self._hop:
            headers = {**self._key_header, **(headers or {}), **self._hop}
        if not isinstance(url, str) or any(v is not None for v in other.values()):
            return super().build_request(
                method,
                url,
                content=content,
                headers=headers,
                timeout=timeout,
                extensions=extensions,
                **other,
            )
        parsed = self._parse(url)
        ext = dict(extensions or {})
        if "timeout" not in ext:
            ext["timeout"] = (
                self._default_timeout
                if timeout is httpx.USE_CLIENT_DEFAULT
                else httpx.Timeout(timeout).as_dict()
            )
        return httpx.Request(method, parsed, content=content, headers=headers, extensions=ext)

    async def post_stream(
        self, url: str, content: bytes, headers: dict[str, str]
    ) -> httpx.Response:
        """``send(build_request("POST", url, ...), stream=True)``, with no ``httpx.Request``
        in between where the transport is ``FastTransport``: the request's bytes are
        built here from a per-URL head, the same bytes the transport would write."""
        transport = self._lean_transport
        parsed = self._parse(url)
        if self._key_header or self._hop:
            headers = {**self._key_header, **headers, **self._hop}
        if not isinstance(transport, FastTransport):
            built = self.build_request("POST", url, content=content, headers=headers)
            return await self.send(built, stream=True)
        route = transport.route(parsed)
        lines = [route.head("POST")]
        for name, value in headers.items():
            raw = name.encode("ascii")
            if raw.lower() not in _SKIP_HEADERS:
                lines.append(b"%s: %s\r\n" % (raw, value.encode("ascii")))
        lines.append(b"content-length: %d\r\n\r\n" % len(content))
        lines.append(content)
        return await transport.send_raw(route, "POST", b"".join(lines), self._default_timeout)

    def _parse(self, url: str) -> httpx.URL:
        parsed = self._urls.get(url)
        if parsed is None:
            if len(self._urls) >= _URL_CACHE:
                self._urls.clear()
            parsed = self._urls[url] = httpx.URL(url)
        return parsed

    async def send(
        self, request: httpx.Request, *, stream: bool = False, **_: Any
    ) -> httpx.Response:
        """Send ``request`` as is; with ``stream=False`` the body is read and the
        connection returned before this returns."""
        response = await self._lean_transport.handle_async_request(request)
        response.request = request
        if not stream:
            try:
                await response.aread()
            finally:
                await response.aclose()
        return response


def upstream_client(
    *,
    read_timeout_s: float,
    connect_timeout_s: float,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    verify: bool | str | ssl.SSLContext = True,
    proxies: Proxies | None = None,
    api_key: str | None = None,
    max_connections: int = 1024,
    pool_timeout_s: float = 5.0,
    hop: str | None = None,
) -> LeanClient:
    """The default upstream client: ``LeanClient`` over ``FastTransport``; proxies
    from the environment unless given; ``api_key`` and ``hop`` sent on every request; at most
    ``max_connections`` to each upstream, waited for ``pool_timeout_s``."""
    return LeanClient(
        api_key=api_key,
        hop=hop,
        timeout=httpx.Timeout(read_timeout_s, connect=connect_timeout_s, pool=pool_timeout_s),
        transport=FastTransport(
            max_connections=max_connections,
            max_idle=256,
            verify=verify,
            proxies=proxies,
            max_body_bytes=max_body_bytes,
        ),
    )
