"""The engine's HTTP boundary: JSON answers, body parsing, the error boundary and the key.

Invariants:
- A body is a JSON object, or the route answers 400 before doing anything.
- ``route`` turns a ``RequestError`` into its status (4xx) and anything else into a
  logged 500 (``InternalServerError``). Native routes answer SGLang's
  ``{"error": {"message"}}``, OpenAI routes its ``ErrorResponse``.
- With a key set, every route but ``/health`` needs ``Authorization: Bearer <key>`` (as
  SGLang's ``--api-key``), else a 401 ``{"error": "Unauthorized"}``. ``seedproxy serve``
  gives its embedded engine a random key per process.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from fastapi import Request
from fastapi.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from ..errors import BadRequest
from ..json_body import json_object
from .errors import InternalError, RequestError

__all__ = ["ClientGone", "KeyGuard", "checked", "json_response", "route"]

logger = logging.getLogger("seedproxy.engine")


def json_response(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")


def checked(body: dict[str, Any], key: str, default: Any, kind: type, what: str, *,
            nonempty: bool = False) -> Any:
    """``body[key]``, else ``default``; a 400 "``key`` must be ``what``" unless it is the
    default or a ``kind`` (non-empty, with ``nonempty``)."""
    value = body.get(key, default)
    if value is not default and (not isinstance(value, kind) or (nonempty and not value)):
        raise RequestError(f"{key} must be {what}", param=key)
    return value


class ClientGone(Exception):
    """The client disconnected before its non-streamed answer was ready."""


Handler = Callable[[Request, dict[str, Any]], Awaitable[Response]]
Endpoint = Callable[[Request], Awaitable[Response]]


def route(native: bool, *, empty_ok: bool = False) -> Callable[[Handler], Endpoint]:
    """The endpoint running ``handler(request, body)``, the body ``{}`` when empty and
    ``empty_ok``."""
    def wrap(handler: Handler) -> Endpoint:
        async def endpoint(request: Request) -> Response:
            return await _guard(native, request, handler, empty_ok)

        return endpoint

    return wrap


async def _guard(native: bool, request: Request, handler: Handler,
                 empty_ok: bool) -> Response:
    err_type = "BadRequestError"
    try:
        raw = await request.body()
        return await handler(request, {} if empty_ok and not raw.strip() else json_object(raw))
    except ClientGone:  # nobody will read this; the job was cancelled
        return Response(status_code=499)
    except RequestError as exc:
        status, msg, param = exc.status, exc.message, exc.param
    except BadRequest as exc:  # a shared rule's refusal (``seedproxy.sampling_fields``, ...)
        status, msg, param = exc.status_code, exc.message, exc.param
    except InternalError as exc:
        logger.error("generation failed inside the engine: %s", exc.message)
        status, msg, param = exc.status, f"Internal server error: {exc.message}", None
        err_type = "InternalServerError"
    except Exception as exc:  # the boundary: our own bug, answered as a 500 and logged
        logger.exception("request failed inside the engine")
        status, msg, param = 500, f"Internal server error: {type(exc).__name__}: {exc}", None
        err_type = "InternalServerError"
    if native:
        return json_response({"error": {"message": msg}}, status)
    return json_response({"object": "error", "message": msg, "type": err_type, "param": param,
                          "code": status}, status)  # SGLang's ErrorResponse


class KeyGuard:
    """Pure ASGI: refuses HTTP requests that lack the bearer ``key``."""

    def __init__(self, app: ASGIApp, *, key: str) -> None:
        self.app = app
        self._expected = f"Bearer {key}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] not in ("/health", "/health_generate"):
            given = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
            if not hmac.compare_digest(given, self._expected):
                await json_response({"error": "Unauthorized"}, 401)(scope, receive, send)
                return
        await self.app(scope, receive, send)
