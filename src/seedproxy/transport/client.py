"""The seam between the proxy and its upstreams: ``UpstreamClient``, implemented by
``LeanClient`` over ``FastTransport``.

Every call names its upstream (``server``, a root URL) and path, and carries the upstream
key (``api_key``) when set and the proxy's hop mark (``loop.py``); no cookie jar (an
upstream's cookies must never reach another client's request), no redirects. A transport
failure leaves the seam only as an ``UpstreamError`` (``failure``: "unreachable" until the
answer's head arrived, then as ``Body`` says).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any, Protocol

import httpx
import orjson

from .body import UpstreamResponse
from .connection import Proxies
from .failure import upstream_failure
from .fast import DEFAULT_MAX_BODY_BYTES, FastTransport, Timeouts, request_bytes
from .loop import HOP_HEADER

__all__ = ["LeanClient", "UpstreamClient", "upstream_client"]


class UpstreamClient(Protocol):
    async def post_stream(self, server: str, path: str, content: bytes,
                          headers: Mapping[str, str]) -> UpstreamResponse:
        """A proxied request: POST ``content``; the answer's body is left unread."""

    async def request(self, method: str, server: str, path: str = "", *,
                      content: bytes | None = None, json: Any = None,
                      headers: Mapping[str, str] | None = None,
                      timeout: float | None = None, stream: bool = False) -> UpstreamResponse:
        """A control call (probe, abort, pause, weights...): its body read unless
        ``stream``; ``timeout`` replaces each of the client's."""

    async def aclose(self) -> None: ...


class LeanClient:
    def __init__(self, *, timeouts: Timeouts, transport: FastTransport,
                 api_key: str | None = None, hop: str | None = None) -> None:
        self.transport = transport
        self.timeouts = timeouts
        self._key_header = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self._hop = {HOP_HEADER: hop} if hop is not None else {}
        """Sent last, so no header passed on from a client replaces it."""

    async def post_stream(self, server: str, path: str, content: bytes,
                          headers: Mapping[str, str]) -> UpstreamResponse:
        return await self._send("POST", server, path, content, headers, self.timeouts,
                                proxied=True)

    async def request(self, method: str, server: str, path: str = "", *,
                      content: bytes | None = None, json: Any = None,
                      headers: Mapping[str, str] | None = None,
                      timeout: float | None = None, stream: bool = False) -> UpstreamResponse:
        if json is not None:
            content = orjson.dumps(json)
            headers = {"content-type": "application/json", **(headers or {})}
        timeouts = self.timeouts if timeout is None else Timeouts(timeout, timeout, timeout)
        response = await self._send(method, server, path, content or b"", headers or {},
                                    timeouts, proxied=False)
        if not stream:
            await response.aread()
        return response

    async def _send(self, method: str, server: str, path: str, content: bytes,
                    headers: Mapping[str, str], timeouts: Timeouts, *,
                    proxied: bool) -> UpstreamResponse:
        if self._key_header or self._hop:
            headers = {**self._key_header, **headers, **self._hop}
        try:
            route = self.transport.route(server + path)
            data = request_bytes(route, method, headers, content)
            return await self.transport.send(route, method, data, timeouts, proxied=proxied,
                                             name=server)
        except httpx.HTTPError as exc:
            raise upstream_failure(server, "unreachable", exc) from exc

    async def aclose(self) -> None:
        await self.transport.aclose()

    async def __aenter__(self) -> LeanClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()


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
    """``LeanClient`` over ``FastTransport``; proxies from the environment unless given;
    at most ``max_connections`` to each upstream, waited for ``pool_timeout_s``."""
    transport = FastTransport(max_connections=max_connections, verify=verify,
                              proxies=proxies, max_body_bytes=max_body_bytes)
    return LeanClient(api_key=api_key, hop=hop, transport=transport,
                      timeouts=Timeouts(connect_timeout_s, read_timeout_s, pool_timeout_s))
