"""ASGI middleware added with ``add_middleware`` (CORS, tracing) sees every request,
the OpenAI POST routes included, which otherwise skip FastAPI's stack."""

from __future__ import annotations

from urllib.parse import quote

import httpx
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from seedproxy.proxy import create_app
from seedproxy.settings import Settings
from tests.conftest import Fake
from tests.helpers.servers import ServerThread

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


class Tracing:
    """Tags every answer with the path it traced."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def tagged(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [
                    *message["headers"],
                    (b"x-traced", quote(scope["path"]).encode()),
                ]
            await send(message)

        await self.app(scope, receive, tagged if scope["type"] == "http" else send)


def test_added_middleware_sees_the_openai_routes(fake: Fake) -> None:
    app = create_app(Settings(upstream=[fake.url]))
    app.add_middleware(Tracing)
    app.add_middleware(CORSMiddleware, allow_origins=["https://ui.example"], allow_methods=["*"])
    origin = {"origin": "https://ui.example"}
    with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        for path in ("/v1/chat/completions", "/sessions/mw/v1/chat/completions"):
            for stream in (False, True):
                answer = http.post(path, json={**BODY, "stream": stream}, headers=origin)
                assert answer.status_code == 200, answer.text
                assert answer.headers["x-traced"] == path
                assert answer.headers["access-control-allow-origin"] == "https://ui.example"
        preflight = http.options(
            "/v1/chat/completions",
            headers={**origin, "access-control-request-method": "POST"},
        )
        assert preflight.status_code == 200
        assert http.get("/sessions/mw").json()["next_index"] == 2
        error = http.post("/sessions/%0A/v1/chat/completions", json=BODY)
        assert (
            error.status_code == 400
            and error.headers["x-traced"] == "/sessions/%0A/v1/chat/completions"
        )
