"""Serving while the embedded engine loads: ``LoadingApp`` is the ASGI app uvicorn
runs while a ``load`` future (on another thread) builds the real proxy app.

Invariants:
- ``/healthz`` is 200 at once. Until the real app has started (its lifespan entered),
  ``/readyz`` is 503 with reason ``engine loading`` and the number of requests waiting;
  from then on the real app answers every request, ``/healthz`` and ``/readyz`` included.
- Any other request waits for the load, at most ``wait_s``; then the real app serves it
  exactly as if it had arrived after the load (the same index, seed and answer). Past
  ``wait_s`` it is a 503 with ``Retry-After``, in OpenAI's error shape (Anthropic's on
  ``/v1/messages``), and nothing of it was recorded: it consumed no index.
- A load that fails (``ConfigError``, or any other exception: a bug) answers the waiting
  requests 503 naming it (500 for a bug), keeps it in ``failure`` and calls
  ``on_failure``, which stops the server; the caller then raises ``failure``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from ..error_presenters import errors_for
from ..errors import ConfigError, SeedProxyError, UpstreamUnavailable

if TYPE_CHECKING:
    from fastapi import FastAPI
    from starlette.types import Receive, Scope, Send

__all__ = ["LOADING_REASON", "LoadingApp"]

LOADING_REASON = "engine loading"
_RETRY_AFTER_S = 5


class LoadingApp:
    def __init__(self, load: Future[FastAPI], *, wait_s: float,
                 on_failure: Callable[[], None]) -> None:
        self._load = load
        self._wait_s = wait_s
        self._on_failure = on_failure
        self._app: FastAPI | None = None
        self._ready = asyncio.Event()
        self._waiting = 0
        self._stack = contextlib.AsyncExitStack()
        self.failure: BaseException | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if self._app is None:
            http = scope["type"] == "http"
            if http and scope["path"] == "/healthz":
                await _json(send, 200, {"status": "ok"})
                return
            if http and scope["path"] == "/readyz" and not self._ready.is_set():
                await _json(send, 503, {"ready": False, "reason": LOADING_REASON,
                                        "waiting": self._waiting})
                return
            if not await self._wait():
                if http:
                    await self._refuse(scope, receive, send)
                return  # a websocket closes unanswered
        assert self._app is not None
        await self._app(scope, receive, send)

    async def _wait(self) -> bool:
        """True once the real app serves; False past ``wait_s`` or on a failed load."""
        self._waiting += 1
        try:
            async with asyncio.timeout(self._wait_s):
                await self._ready.wait()
        except TimeoutError:
            return False
        finally:
            self._waiting -= 1
        return self._app is not None

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        failure = self.failure
        refusal: SeedProxyError
        if failure is None:
            refusal = UpstreamUnavailable(f"{LOADING_REASON}: retry shortly (GET /readyz "
                                          "says when)", retry_after_s=_RETRY_AFTER_S)
        elif isinstance(failure, ConfigError):
            refusal = UpstreamUnavailable(f"the engine failed to load: {failure.message}")
        else:
            refusal = SeedProxyError("internal error")
        await errors_for(scope["path"]).response(refusal)(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        await receive()  # lifespan.startup
        task = asyncio.create_task(self._start())
        await send({"type": "lifespan.startup.complete"})
        await receive()  # lifespan.shutdown
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await self._stack.aclose()
        await send({"type": "lifespan.shutdown.complete"})

    async def _start(self) -> None:
        try:
            app = await asyncio.wrap_future(self._load)
            await self._stack.enter_async_context(app.router.lifespan_context(app))
            self._app = app
        except Exception as exc:  # kept and re-raised by the caller, with its traceback
            self.failure = exc
        self._ready.set()
        if self.failure is not None:
            self._on_failure()


async def _json(send: Send, status: int, body: dict[str, Any]) -> None:
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})
