"""Each upstream has its own connection limit: requests hung on one never hold up a
request to another; a request that finds its upstream's connections all taken waits
the pool timeout; and calls other than proxied requests (health, pause, abort) have a
lane of their own, so they still reach a server whose proxied requests hold it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx

from seedproxy.transport.client import LeanClient
from seedproxy.transport.connection import Proxies
from seedproxy.transport.fast import FastTransport, Timeouts
from tests.helpers.seam import fails_with


class HoldingServer:
    """Answers ``/hold`` once ``release`` is set, anything else at once; counts arrivals."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.held = 0
        self._arrived = asyncio.Condition()
        self.url = ""

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                await reader.readexactly(length)
                if head.split(b" ")[1] == b"/hold":
                    async with self._arrived:
                        self.held += 1
                        self._arrived.notify_all()
                    await self.release.wait()
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                await writer.drain()
        writer.close()

    async def arrived(self, count: int) -> None:
        async with self._arrived:
            await self._arrived.wait_for(lambda: self.held >= count)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[HoldingServer]:
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        try:
            yield self
        finally:
            self.release.set()
            server.close()


async def test_requests_hung_on_one_upstream_never_hold_up_another() -> None:
    async with HoldingServer().running() as hung, HoldingServer().running() as other:
        transport = FastTransport(max_connections=2, proxies=Proxies())
        async with LeanClient(timeouts=Timeouts(60, 60, 0.2), transport=transport) as client:
            held = [asyncio.create_task(client.post_stream(hung.url, "/hold", b"", {}))
                    for _ in range(2)]
            await hung.arrived(2)
            answer = await client.post_stream(other.url, "/x", b"", {})  # its own limit
            assert await answer.aread() == b"ok"
            with fails_with(httpx.PoolTimeout, match="within 0.2 s"):
                await client.post_stream(hung.url, "/x", b"", {})
            # The control lane still reaches the hung server.
            health = await client.request("GET", hung.url + "/health")
            assert (health.status_code, health.content) == (200, b"ok")
            assert not any(task.done() for task in held)
            hung.release.set()
            for task in held:
                assert await (await task).aread() == b"ok"
            # Their permits came back: the hung server takes proxied requests again.
            again = await client.post_stream(hung.url, "/x", b"", {})
            assert await again.aread() == b"ok"
