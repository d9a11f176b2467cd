"""The engine's ASGI app, SGLang's HTTP surface over one ``Worker``, and running it under
uvicorn: blocking, or in a background thread.

Invariants:
- Every body is parsed and validated before anything is queued (``route_io``).
- A non-streamed request whose client disconnects is cancelled at the next token (streams
  by the response machinery).
- ``start_engine_thread`` returns only once the server serves (the worker runs, the
  socket accepts), and ``RunningEngine.stop()`` shuts it and its worker down.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse

from . import chat, completions
from .control import control_routes
from .errors import EngineError, RequestError
from .generator import DEFAULT_CACHE_MB, DEFAULT_MAX_BATCH
from .model import EngineModel, load_model
from .route_io import ClientGone, KeyGuard, checked, json_response, route
from .state import EngineState
from .worker import StepHook, Worker

__all__ = ["RunningEngine", "create_engine_app", "run_engine", "start_engine_thread"]

logger = logging.getLogger("seedproxy.engine")

_SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


async def _until_disconnect(request: Request, work: Coroutine[Any, Any, Any]) -> Response:
    """``work``'s answer, unless the client disconnects first (``work`` is then cancelled).
    Only after the body was read: the next ASGI message is then ``http.disconnect``."""
    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(disconnected())
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    if task.cancelled():
        raise ClientGone
    return json_response(task.result())


def _sse(gen: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(gen, media_type="text/event-stream", headers=_SSE_HEADERS)


def create_engine_app(model: EngineModel, max_batch: int = DEFAULT_MAX_BATCH,
                      cache_mb: int = DEFAULT_CACHE_MB, on_step: StepHook | None = None,
                      api_key: str | None = None) -> FastAPI:
    """The SGLang-compatible app serving ``model``; its lifespan runs the worker."""
    state = EngineState(model, Worker(model, max_batch=max_batch, cache_mb=cache_mb,
                                      on_step=on_step))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Built after the first answer, before the first grammar request needs it.
        state.worker.start(after_first_answer=state.grammars.warm)
        try:
            yield
        finally:
            state.worker.stop()

    app = FastAPI(title="seedproxy engine", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.engine = state
    if api_key is not None:
        app.add_middleware(KeyGuard, key=api_key)
    app.include_router(control_routes(state))
    _tokenizer_routes(app, model)
    _generation_routes(app, state)
    return app


def _tokenizer_routes(app: FastAPI, model: EngineModel) -> None:
    @app.get("/health")
    @app.get("/health_generate")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/v1/models")
    async def models() -> Response:
        card = {"id": model.name, "object": "model", "created": 0, "owned_by": "sglang",
                "root": model.name, "parent": None, "max_model_len": model.context_length}
        return json_response({"object": "list", "data": [card]})

    @app.post("/detokenize")
    @route(False)
    async def detokenize(request: Request, body: dict[str, Any]) -> Response:
        """``{"tokens": [ids]}`` -> ``{"text": str}``, or a batch of each;
        ``skip_special_tokens`` defaults to true, as SGLang's."""
        tokens = body.get("tokens")
        skip = checked(body, "skip_special_tokens", True, bool, "a boolean")
        batch = isinstance(tokens, list) and bool(tokens) and isinstance(tokens[0], list)
        rows = tokens if batch else [tokens]
        vocab = len(model.tokenizer)
        if not isinstance(rows, list) or not all(
                isinstance(row, list) and all(type(t) is int and 0 <= t < vocab for t in row)
                for row in rows):
            raise RequestError("tokens must be a list of token ids, or a list of such "
                               "lists", param="tokens")
        texts = [str(model.tokenizer.decode(row, skip_special_tokens=skip)) for row in rows]
        return json_response({"text": texts if batch else texts[0]})

    @app.post("/tokenize")
    @app.post("/v1/tokenize")
    @route(False)
    async def tokenize(request: Request, body: dict[str, Any]) -> Response:
        """``{"prompt": str}`` -> ``{"tokens": [ids], "count", "max_model_len"}``, or a batch
        of each; ``add_special_tokens`` defaults to true, as SGLang's."""
        prompt = body.get("prompt")
        special = checked(body, "add_special_tokens", True, bool, "a boolean")
        batch = isinstance(prompt, list)
        rows = prompt if batch else [prompt]
        if not rows or not all(isinstance(row, str) for row in rows):
            raise RequestError("prompt must be a string or a list of strings", param="prompt")
        ids = [list(model.tokenizer.encode(row, add_special_tokens=special)) for row in rows]
        return json_response({"tokens": ids if batch else ids[0],
                              "count": [len(i) for i in ids] if batch else len(ids[0]),
                              "max_model_len": model.context_length})


def _generation_routes(app: FastAPI, state: EngineState) -> None:
    @app.post("/generate")
    @route(True)
    async def generate(request: Request, body: dict[str, Any]) -> Response:
        reqs = completions.parse_generate(state, body)
        if body.get("stream") is True:
            return _sse(completions.generate_stream(state, reqs))
        batched = isinstance(body.get("text"), list) or (
            isinstance(body.get("input_ids"), list) and bool(body["input_ids"])
            and isinstance(body["input_ids"][0], list))
        return await _until_disconnect(request,
                                       completions.generate_response(state, reqs, batched))

    @app.post("/v1/chat/completions")
    @route(False)
    async def chat_completions(request: Request, body: dict[str, Any]) -> Response:
        job = chat.parse_chat(state, body, request.headers)
        if body.get("stream") is True:
            return _sse(chat.chat_stream(state, job))
        return await _until_disconnect(request, chat.chat_response(state, job))

    @app.post("/v1/completions")
    @route(False)
    async def text_completions(request: Request, body: dict[str, Any]) -> Response:
        job = completions.parse_completion(state, body)
        if body.get("stream") is True:
            return _sse(completions.completion_stream(state, job))
        return await _until_disconnect(request, completions.completion_response(state, job))


@dataclass
class RunningEngine:
    """A live engine in this process. ``url`` is its root (no ``/v1``)."""

    url: str
    server: uvicorn.Server
    thread: threading.Thread

    def stop(self, timeout: float = 30.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=timeout)


def start_engine_thread(model: EngineModel, host: str = "127.0.0.1", port: int = 0,
                        timeout: float = 60.0, max_batch: int = DEFAULT_MAX_BATCH,
                        cache_mb: int = DEFAULT_CACHE_MB, on_step: StepHook | None = None,
                        api_key: str | None = None) -> RunningEngine:
    """Serve ``model`` from a daemon thread; return once its server has started."""
    # Listening first: connections queue until uvicorn accepts them.
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise EngineError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(2048)
    port = int(sock.getsockname()[1])
    app = create_engine_app(model, max_batch=max_batch, cache_mb=cache_mb, on_step=on_step,
                            api_key=api_key)
    config = uvicorn.Config(app, host=host, port=port,
                            log_level="warning", lifespan="on", timeout_keep_alive=30)
    woken = threading.Event()
    server = _Server(config)
    server.started_event = woken

    def run() -> None:
        try:
            server.run(sockets=[sock])
        finally:
            woken.set()  # a failed start wakes the caller too
            sock.close()

    thread = threading.Thread(target=run, name="seedproxy-engine-http", daemon=True)
    thread.start()
    if not woken.wait(timeout):
        server.should_exit = True
        raise EngineError(f"the engine server on {host}:{port} did not start in time")
    if not server.started:
        raise EngineError(f"the engine server on {host}:{port} failed to start")
    url = f"http://{host}:{port}"
    logger.info("engine serving %s at %s", model.name, url)
    return RunningEngine(url, server, thread)


class _Server(uvicorn.Server):
    """uvicorn's server, setting ``started_event`` once it serves."""

    started_event: threading.Event

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            self.started_event.set()


def run_engine(host: str, port: int, model_path: str | None,
               max_batch: int = DEFAULT_MAX_BATCH, cache_mb: int = DEFAULT_CACHE_MB) -> None:
    """Load the model and serve it until interrupted (for ``seedproxy engine``)."""
    model = load_model(model_path)
    logger.info("engine serving %s on http://%s:%d", model.name, host, port)
    uvicorn.run(create_engine_app(model, max_batch=max_batch, cache_mb=cache_mb),
                host=host, port=port, log_level="info")
