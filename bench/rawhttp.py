"""A minimal keep-alive HTTP/1.1 client over asyncio streams, for the benchmark's load.

It does only what the benchmark needs (POST a pre-encoded request, read a
content-length or chunked answer) so that the client's own cost stays well below
the costs it measures; ``overhead.py`` measures it against httpx in the same run.
"""

from __future__ import annotations

import asyncio
import socket
import time


class RawConnection:
    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> RawConnection:
        self.reader, self.writer = await asyncio.open_connection(
            self.host, self.port, limit=1 << 20
        )
        sock = self.writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return self

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    async def request(self, data: bytes) -> tuple[int, float, bytes]:
        """Send ``data`` (a whole request); return (status, seconds to the first body
        byte, body). Reopens the connection once if the server had closed it."""
        if self.writer is None:
            await self.open()
        try:
            return await self._exchange(data)
        except (ConnectionError, asyncio.IncompleteReadError):
            self.close()
            await self.open()
            return await self._exchange(data)

    async def _exchange(self, data: bytes) -> tuple[int, float, bytes]:
        assert self.reader is not None and self.writer is not None
        started = time.perf_counter()
        self.writer.write(data)
        reader = self.reader
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        length = -1
        chunked = False
        close = False
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
            elif name == b"connection" and b"close" in value.lower():
                close = True
        if chunked:
            parts = []
            first = 0.0
            while True:
                size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                if size == 0:
                    await reader.readuntil(b"\r\n")
                    break
                part = await reader.readexactly(size + 2)
                if not first:
                    first = time.perf_counter() - started
                parts.append(part[:-2])
            body = b"".join(parts)
        else:
            body = await reader.readexactly(length) if length > 0 else b""
            first = time.perf_counter() - started
        if close:
            self.close()
        return status, first, body


def build_request(
    host: str, port: int, method: str, path: str, body: bytes, headers: dict[str, str] | None = None
) -> bytes:
    lines = [
        f"{method} {path} HTTP/1.1",
        f"host: {host}:{port}",
        "content-type: application/json",
        f"content-length: {len(body)}",
    ]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body
