"""The hot OpenAI routes, answered ahead of FastAPI's middleware stack and router.

FastAPI's per-request routing (a scan of every route, the request/response and
dependency wrappers) cost about as much as the proxy's own work, and its middleware
stack (a native-telemetry check that reads the environment, server-error, telemetry
and body-limit wrappers) a few percent more, so ``ProxyApp`` sends POSTs to the
OpenAI routes (also under ``/sessions/{id}``) straight to their ``Admission``. Once any
middleware is added with ``add_middleware`` (CORS, tracing: seedproxy adds none),
every request takes FastAPI's stack instead, so that middleware sees all of them;
the same handlers answer there. Everything else, and the OpenAPI schema of these
same routes, stays with FastAPI. Errors are rendered exactly as the FastAPI
handlers render them.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Message, Receive, Scope, Send

from ..backends import OPENAI_ENDPOINTS, Endpoint
from ..backends.anthropic_bridge import anthropic_error
from ..backends.loop import HOP_HEADER, LOOP_HEADER, LOOP_STATUS
from ..errors import SeedProxyError, error_body
from ..pipeline.admission import Admission
from .access import Access

__all__ = ["MESSAGES_PATHS", "HotRoutes", "ProxyApp"]

log = logging.getLogger("seedproxy")

_SESSIONS = "/sessions/"
_HOP = HOP_HEADER.encode()
MESSAGES_PATHS = ("/v1/messages", "/v1/messages/count_tokens")
"""The routes that answer in Anthropic's shape."""


def _loop_refusal(path: str) -> Response:
    """508 in the route's protocol shape (Anthropic's on the Messages routes)."""
    message = ("this request came back to the seedproxy that sent it upstream: one of "
               "its upstreams leads back to the proxy itself; remove it (DELETE "
               "/fleet/upstreams?url=...) or fix --upstream")
    body = (anthropic_error(LOOP_STATUS, message) if path.endswith(MESSAGES_PATHS)
            else error_body(message, "loop_detected", code="upstream_loop"))
    return JSONResponse(body, status_code=LOOP_STATUS, headers={LOOP_HEADER: "1"})


class ProxyApp(FastAPI):
    """FastAPI, with ``hot`` (once set) answering its routes first, and any request
    carrying ``hop`` (this proxy's own hop mark, ``backends.loop``) refused before
    anything else: it went out of this proxy to an upstream and came back."""

    hot: HotRoutes | None = None
    hop: bytes | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        hot = self.hot
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        if self.hop is not None and (_HOP, self.hop) in scope["headers"]:
            await _loop_refusal(scope["path"])(scope, receive, send)
            return
        if hot is None or self.user_middleware:
            await self._answered(scope, receive, send)
            return
        matched = hot.match(scope)
        if matched is None:
            await self._answered(scope, receive, send)
        else:
            if self.root_path:
                scope["root_path"] = self.root_path
            scope["app"] = self
            await hot.handle(scope, receive, send, *matched)

    async def _answered(self, scope: Scope, receive: Receive, send: Send) -> None:
        """FastAPI's stack, less one re-raise: Starlette's ``ServerErrorMiddleware``
        raises again after its handler sent the whole 500, and the server then closes
        the connection, resetting a keep-alive client. An error after a complete answer
        ends here (the handler logged it); one before or during an answer still
        propagates, so a half-sent answer's connection is closed."""
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
    """Matches the hot requests and answers them through the OpenAI admission."""

    def __init__(
        self,
        *,
        admission: Admission,
        access: Access,
        on_error: Callable[[Request, SeedProxyError], Awaitable[Response]],
    ) -> None:
        self._admission = admission
        self._access = access
        self._on_error = on_error
        self._endpoints = {endpoint.value: endpoint for endpoint in OPENAI_ENDPOINTS}

    def match(self, scope: Scope) -> tuple[Endpoint, str | None] | None:
        """The endpoint and path session of a hot request; None for anything else."""
        if scope["method"] != "POST":
            return None
        path: str = scope["path"]
        endpoint = self._endpoints.get(path)
        if endpoint is not None:
            return endpoint, None
        if path.startswith(_SESSIONS):
            session_id, slash, rest = path[len(_SESSIONS) :].partition("/")
            endpoint = self._endpoints.get("/" + rest) if session_id and slash else None
            if endpoint is not None:
                return endpoint, session_id
        return None

    async def handle(
        self, scope: Scope, receive: Receive, send: Send, endpoint: Endpoint, session_id: str | None
    ) -> None:
        request = Request(scope, receive)
        try:
            session = await self._access.session_for(request, session_id, cached=True)
            response = await self._admission.handle(
                request, endpoint, session,
                lambda: self._access.session_for(request, session_id, cached=True))
        except SeedProxyError as exc:  # the admission answers its own: this is access's
            self._admission.refused(endpoint, exc, session_id)
            response = await self._on_error(request, exc)
        except Exception:
            log.exception("unexpected error on %s", scope["path"])
            response = JSONResponse(error_body("internal error", "internal_error"), status_code=500)
        await response(scope, receive, send)
