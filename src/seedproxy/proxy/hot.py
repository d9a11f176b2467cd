"""The one way into the admission routes (OpenAI's and Messages), answered ahead of
FastAPI's router and middleware stack (which cost about as much as the proxy's own
work): ``ProxyApp`` sends POSTs to these routes (also under ``/sessions/{id}``)
straight to ``HotRoutes``. Once any middleware is added (``add_middleware``), every
request takes FastAPI's stack instead, so that middleware sees all of them: the routes
declared there (``routes.py``) call the same ``HotRoutes.answer``."""

from __future__ import annotations

import logging

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from ..dialects import OPENAI_ENDPOINTS, Endpoint
from ..error_presenters import errors_for, unexpected
from ..errors import SeedProxyError, UpstreamLoop
from ..pipeline.admission import Admission
from ..transport.loop import HOP_HEADER, LOOP_HEADER
from .access import Access

__all__ = ["HotRoutes", "ProxyApp"]

log = logging.getLogger("seedproxy")

_SESSIONS = "/sessions/"
_HOP = HOP_HEADER.encode()


class ProxyApp(FastAPI):
    """FastAPI, with ``hot`` (once set) answering its routes first; a request carrying
    ``hop`` (this proxy's own mark, ``transport.loop``) came back from an upstream and
    is refused before anything else."""

    hot: HotRoutes | None = None
    hop: bytes | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        hot = self.hot
        if self.hop is not None and (_HOP, self.hop) in scope["headers"]:  # 508
            loop = UpstreamLoop("this request came back to the seedproxy that sent it upstream: "
                                "one of its upstreams leads back to the proxy itself; remove it "
                                "(DELETE /fleet/upstreams?url=...) or fix --upstream",
                                code="upstream_loop")
            refusal = errors_for(scope["path"]).response(loop, {LOOP_HEADER: "1"})
            await refusal(scope, receive, send)
            return
        if hot is None or self.user_middleware or (matched := hot.match(scope)) is None:
            await self._answered(scope, receive, send)
            return
        if self.root_path:
            scope["root_path"] = self.root_path
        scope["app"] = self
        await hot.handle(scope, receive, send, *matched)

    async def _answered(self, scope: Scope, receive: Receive, send: Send) -> None:
        """FastAPI's stack, less the re-raise of Starlette's ``ServerErrorMiddleware``
        after a complete 500 (which would reset a keep-alive client's connection); an
        error before or during an answer still propagates (its connection is closed)."""
        complete = False
        status = 0

        async def sending(message: Message) -> None:
            nonlocal complete, status
            await send(message)
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                complete = True

        try:
            await super().__call__(scope, receive, sending)
        except Exception:
            if not complete:
                raise
            if status != 500:  # not the handler's answer, so not logged yet
                log.exception("unexpected error after answering %s", scope["path"])


class HotRoutes:
    """Answers the admission routes through their ``Admission`` (Messages' for
    ``/v1/messages``, OpenAI's for the rest)."""

    def __init__(self, *, openai: Admission, messages: Admission, access: Access) -> None:
        self._access = access
        self._routes: dict[str, tuple[Endpoint, Admission]] = {
            endpoint.value: (endpoint, openai) for endpoint in OPENAI_ENDPOINTS}
        self._routes[Endpoint.MESSAGES.value] = (Endpoint.MESSAGES, messages)

    def match(self, scope: Scope) -> tuple[Endpoint, str | None] | None:
        """The endpoint and path session of a hot request; None for anything else."""
        if scope["method"] != "POST":
            return None
        path: str = scope["path"]
        route = self._routes.get(path)
        if route is not None:
            return route[0], None
        if path.startswith(_SESSIONS):
            session_id, slash, rest = path[len(_SESSIONS) :].partition("/")
            route = self._routes.get("/" + rest) if session_id and slash else None
            if route is not None:
                return route[0], session_id
        return None

    async def answer(self, request: Request, endpoint: Endpoint, session_id: str | None
                     ) -> Response:
        """``session_id``: the session the path names; access's refusals are answered
        here in the admission's shape."""
        admission = self._routes[endpoint.value][1]
        try:
            session = await self._access.session_for(request, session_id, cached=True)
        except SeedProxyError as exc:
            admission.refused(endpoint, exc, session_id)
            return admission.errors.response(exc)
        return await admission.handle(
            request, endpoint, session,
            lambda: self._access.session_for(request, session_id, cached=True))

    async def handle(
        self, scope: Scope, receive: Receive, send: Send, endpoint: Endpoint, session_id: str | None
    ) -> None:
        try:
            response = await self.answer(Request(scope, receive), endpoint, session_id)
        except Exception:  # seedproxy's own bug, answered as FastAPI's edge answers it
            response = unexpected(scope["path"])
        await response(scope, receive, send)
