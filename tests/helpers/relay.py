"""An HTTP relay on loopback: forwards every request, headers included, to ``target``
(set once known) and returns the answer as it came; ``answers`` keeps each forwarded
request's path, status and JSON answer, ``marks`` the hop mark it carried. A proxy
given the relay as an upstream while the relay points back at the proxy is a loop
through another hop."""

from __future__ import annotations

from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.helpers.servers import ServerThread

__all__ = ["Relay"]

_DROPPED = {"host", "content-length", "connection", "transfer-encoding"}


class Relay:
    def __init__(self) -> None:
        self.target: str | None = None
        self.answers: list[tuple[str, int, Any]] = []
        self.marks: list[str | None] = []
        app = Starlette(routes=[Route("/{path:path}", self._forward,
                                      methods=["GET", "POST", "DELETE"])])
        self.server = ServerThread(app).start()
        self.url = self.server.url

    async def _forward(self, request: Request) -> Response:
        if self.target is None:
            return Response(status_code=502)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROPPED}
        async with httpx.AsyncClient(timeout=120) as client:
            answer = await client.request(request.method, self.target + request.url.path,
                                          content=await request.body(), headers=headers)
        self.marks.append(request.headers.get("x-seedproxy-hop"))
        shown = answer.json() if answer.headers.get("content-type") == "application/json" \
            else None
        self.answers.append((request.url.path, answer.status_code, shown))
        kept: dict[str, Any] = {k: v for k, v in answer.headers.items()
                                if k.lower() not in _DROPPED | {"content-encoding"}}
        return Response(answer.content, status_code=answer.status_code, headers=kept)

    def stop(self) -> None:
        self.server.stop()
