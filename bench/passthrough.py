"""A bare pass-through proxy for ``bench/clients.py``: a raw ASGI app under uvicorn that
POSTs each request's body to one upstream with the client named by ``--client`` and
relays the upstream's bytes chunk by chunk as they arrive (so a streamed answer streams
through). Nothing else differs between the clients.

    python bench/passthrough.py --client lean|aiohttp|pyreqwest|httpx --port P --upstream URL
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import uvicorn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

Fetch = Callable[[bytes], AsyncIterator[bytes]]
HEADERS = {"content-type": "application/json"}


def make_fetch(client: str, url: str) -> Fetch:
    """A function that POSTs a body to ``url`` and yields the answer's bytes as they
    arrive; its client is built lazily, inside the server's event loop."""
    state: dict[str, Any] = {}

    if client == "lean":
        from seedproxy.transport.client import upstream_client
        from seedproxy.transport.connection import Proxies

        async def lean(body: bytes) -> AsyncIterator[bytes]:
            if not state:
                state["c"] = upstream_client(
                    read_timeout_s=30, connect_timeout_s=5, proxies=Proxies()
                )
            response = await state["c"].post_stream(url, "", body, HEADERS)
            try:
                async for chunk in response.stream:
                    yield chunk
            finally:
                await response.aclose()

        return lean
    if client == "aiohttp":
        import aiohttp

        async def via_aiohttp(body: bytes) -> AsyncIterator[bytes]:
            if not state:
                state["c"] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1024))
            async with state["c"].post(url, data=body, headers=HEADERS) as response:
                async for chunk in response.content.iter_any():
                    yield chunk

        return via_aiohttp
    if client == "pyreqwest":
        from pyreqwest.client import ClientBuilder

        async def via_pyreqwest(body: bytes) -> AsyncIterator[bytes]:
            if not state:
                state["c"] = ClientBuilder().max_connections(1024).build()
            request = state["c"].post(url).header("content-type", "application/json")
            async with request.body_bytes(body).build_streamed() as response:
                while (chunk := await response.body_reader.read_chunk()) is not None:
                    yield bytes(chunk)

        return via_pyreqwest
    if client == "httpx":
        import httpx

        async def via_httpx(body: bytes) -> AsyncIterator[bytes]:
            if not state:
                state["c"] = httpx.AsyncClient(
                    limits=httpx.Limits(max_connections=1024), trust_env=False
                )
            async with state["c"].stream("POST", url, content=body, headers=HEADERS) as response:
                async for chunk in response.aiter_raw():
                    yield chunk

        return via_httpx
    raise SystemExit(f"unknown client {client!r}")


def app_for(fetch: Fetch) -> Callable[..., Awaitable[None]]:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if scope["method"] == "GET":  # readiness
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})
            return
        parts = []
        more = True
        while more:
            message = await receive()
            parts.append(message.get("body", b""))
            more = message.get("more_body", False)
        started = False
        async for chunk in fetch(b"".join(parts)):
            if not started:
                started = True
                await send({
                    "type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")],
                })
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--client", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    args = parser.parse_args()
    uvicorn.run(
        app_for(make_fetch(args.client, args.upstream)), host="127.0.0.1", port=args.port,
        loop="uvloop", http="httptools", log_level="warning", access_log=False, lifespan="off",
    )


if __name__ == "__main__":
    main()
