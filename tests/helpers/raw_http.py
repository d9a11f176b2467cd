"""Byte-exact HTTP/1.1 servers for transport tests, run in the test's own event loop:
``RawServer`` answers each request with the bytes a script returns (or closes the
connection without answering), and ``ForwardProxy`` is a tiny real forward proxy
(absolute-form requests and CONNECT tunnels) that maps every host to 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

__all__ = ["CLOSE", "ForwardProxy", "RawRequest", "RawServer", "answer"]

CLOSE = b""
"""A script's answer meaning: close the connection without answering."""


@dataclass
class RawRequest:
    method: str
    target: str
    headers: dict[str, str]
    body: bytes
    connection: int
    """Which connection (0, 1, ...) carried it."""


def answer(body: bytes, *, status: int = 200, headers: str = "") -> bytes:
    """A Content-Length-framed answer; ``headers`` are extra CRLF-ended lines."""
    return (
        f"HTTP/1.1 {status} OK\r\ncontent-length: {len(body)}\r\n{headers}\r\n".encode() + body
    )


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str], bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return method, target, headers, body


@dataclass
class RawServer:
    script: Callable[[RawRequest], bytes]
    host: str = "127.0.0.1"
    ssl_context: ssl.SSLContext | None = None
    requests: list[RawRequest] = field(default_factory=list)
    port: int = 0
    _connections: int = 0
    _server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        scheme = "https" if self.ssl_context else "http"
        return f"{scheme}://{host}:{self.port}"

    async def __aenter__(self) -> RawServer:
        self._server = await asyncio.start_server(
            self._serve, self.host, 0, ssl=self.ssl_context
        )
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 2)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        number = self._connections
        self._connections += 1
        try:
            while True:
                try:
                    method, target, headers, body = await _read_request(reader)
                except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
                    break
                request = RawRequest(method, target, headers, body, number)
                self.requests.append(request)
                reply = self.script(request)
                if reply == CLOSE:
                    break
                if headers.get("connection") == "close":  # as a real server does
                    reply = reply.replace(b"\r\n", b"\r\nconnection: close\r\n", 1)
                writer.write(reply)
                await writer.drain()
                if b"connection: close" in reply.split(b"\r\n\r\n", 1)[0].lower():
                    break
        except asyncio.CancelledError:
            pass  # the test's loop is ending
        finally:
            writer.close()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await writer.wait_closed()


@dataclass
class ForwardProxy:
    """Records each request line it got (``seen``) and each Proxy-Authorization."""

    refuse_tunnels: bool = False
    seen: list[str] = field(default_factory=list)
    auth: list[str | None] = field(default_factory=list)
    port: int = 0
    _server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> ForwardProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 2)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            method, target, headers, body = await _read_request(reader)
            self.seen.append(f"{method} {target}")
            self.auth.append(headers.get("proxy-authorization"))
            if method == "CONNECT" and self.refuse_tunnels:
                writer.write(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n")
                await writer.drain()
                return
            if method == "CONNECT":
                port = int(target.rsplit(":", 1)[1])
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
                return
            parts = urlsplit(target)
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", parts.port or 80)
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            lines = [f"{method} {path} HTTP/1.1"]
            lines += [
                f"{k}: {v}" for k, v in headers.items()
                if k not in ("proxy-authorization", "connection")
            ]
            lines.append("connection: close")
            up_writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
            await _pipe(up_reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()
