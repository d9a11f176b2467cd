"""The engine's key: with one set, every route but ``/health`` needs ``Authorization:
Bearer <key>`` (as SGLang's ``--api-key``), else a 401 ``{"error": "Unauthorized"}``.
``seedproxy serve`` gives its embedded engine a random key per process.
"""

from __future__ import annotations

import hmac

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["KeyGuard"]

_OPEN = frozenset({"/health", "/health_generate"})


class KeyGuard:
    """Pure ASGI: refuses HTTP requests that lack the bearer ``key``."""

    def __init__(self, app: ASGIApp, *, key: str) -> None:
        self.app = app
        self._expected = f"Bearer {key}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] not in _OPEN:
            given = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
            if not hmac.compare_digest(given, self._expected):
                await JSONResponse({"error": "Unauthorized"}, 401)(scope, receive, send)
                return
        await self.app(scope, receive, send)
