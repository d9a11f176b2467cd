"""The engine's ASGI app: SGLang's HTTP surface over one ``Worker``.

Invariants:
- Every request body is parsed and validated before anything is queued; bad input is a
  400 (``RequestError``). A failure inside the engine (an unexpected exception, or a
  generation that failed on the worker) is logged and answered with a 500
  (``InternalServerError``), never passed off as the client's fault.
- A non-streamed request whose client disconnects is cancelled: its job stops at the next
  token (streams are cancelled by the response machinery the same way).
- OpenAI routes answer errors with SGLang's ``ErrorResponse``
  (``{object: "error", message, type, param, code}``); ``/generate`` with SGLang's
  ``{"error": {"message": ...}}``.
- The app's lifespan starts the worker thread and stops it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse

from .chat import chat_response, chat_stream, parse_chat
from .completions import completion_response, completion_stream, parse_completion
from .errors import InternalError, RequestError
from .generator import DEFAULT_CACHE_MB, DEFAULT_MAX_BATCH
from .model import EngineModel
from .native import generate_response, generate_stream, parse_generate
from .openai_common import error_body
from .state import EngineState
from .worker import Worker

__all__ = ["create_engine_app"]

logger = logging.getLogger("seedproxy.engine")

_SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def _json(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")


async def _body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise RequestError(f"Invalid JSON body: {exc}") from exc
    if not isinstance(body, dict):
        raise RequestError("The request body must be a JSON object.")
    return body


class _ClientGone(Exception):
    """The client disconnected before its non-streamed answer was ready."""


async def _guard(native: bool, handler: Callable[[], Awaitable[Response]]) -> Response:
    """Run ``handler``; a ``RequestError`` is its status (4xx), anything else a 500."""
    err_type = "BadRequestError"
    try:
        return await handler()
    except _ClientGone:  # nobody will read this; the job was cancelled
        return Response(status_code=499)
    except RequestError as exc:
        status, msg, param = exc.status, exc.message, exc.param
    except InternalError as exc:
        logger.error("generation failed inside the engine: %s", exc.message)
        status, msg, param = exc.status, f"Internal server error: {exc.message}", None
        err_type = "InternalServerError"
    except Exception as exc:  # the boundary: our own bug, answered as a 500 and logged
        logger.exception("request failed inside the engine")
        status, msg, param = 500, f"Internal server error: {type(exc).__name__}: {exc}", None
        err_type = "InternalServerError"
    if native:
        return _json({"error": {"message": msg}}, status)
    return _json(error_body(msg, status, err_type=err_type, param=param), status)


async def _until_disconnect(request: Request, work: Coroutine[Any, Any, Any]) -> Any:
    """Await ``work`` unless the client disconnects first; then cancel it.

    Call only after the body has been read: from then on the next ASGI message is
    ``http.disconnect``.
    """
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
        raise _ClientGone
    return task.result()


def _sse(gen: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(gen, media_type="text/event-stream", headers=_SSE_HEADERS)


def create_engine_app(model: EngineModel, max_batch: int = DEFAULT_MAX_BATCH,
                      cache_mb: int = DEFAULT_CACHE_MB) -> FastAPI:
    """Build the SGLang-compatible app serving ``model``; its lifespan runs the worker."""
    state = EngineState(model, Worker(model, max_batch=max_batch, cache_mb=cache_mb))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state.worker.start()
        state.processors.grammars.warm()  # the first grammar request need not wait
        try:
            yield
        finally:
            state.worker.stop()

    app = FastAPI(title="seedproxy engine", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.engine = state

    @app.get("/health")
    @app.get("/health_generate")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/v1/models")
    async def models() -> Response:
        card = {"id": model.name, "object": "model", "created": 0, "owned_by": "sglang",
                "root": model.name, "parent": None, "max_model_len": model.context_length}
        return _json({"object": "list", "data": [card]})

    @app.get("/get_model_info")
    async def model_info() -> Response:
        return _json({
            "model_path": model.model_path, "tokenizer_path": model.model_path,
            "is_generation": True, "preferred_sampling_params": None,
            "weight_version": "default", "has_image_understanding": False,
            "has_audio_understanding": False, "model_type": model.arch.model_type,
            "architectures": [model.arch.hf_class],
        })

    @app.get("/get_server_info")
    async def server_info() -> Response:
        return _json({"model_path": model.model_path, "enable_deterministic_inference": True,
                      "sampling_backend": "pytorch", "context_length": model.context_length,
                      "threads": state.worker.threads, "max_batch": state.worker.max_batch,
                      "prefix_cache_mb": state.worker.cache_mb,
                      "version": "seedproxy-engine"})

    @app.post("/abort_request")
    async def abort_request(request: Request) -> Response:
        """SGLang's ``/abort_request``: ``{"rid"}`` or ``{"abort_all": true}``."""
        async def run() -> Response:
            body = await _body(request)
            rid = body.get("rid")
            if body.get("abort_all") is True:
                state.worker.abort(None)
            elif isinstance(rid, str) and rid:
                state.worker.abort(rid)
            else:
                raise RequestError("rid must be a non-empty string (or abort_all: true)",
                                   param="rid")
            return Response(status_code=200)

        return await _guard(True, run)

    @app.post("/detokenize")
    async def detokenize(request: Request) -> Response:
        """SGLang's ``/detokenize``: ``{"tokens": [ids]}`` -> ``{"text"}``."""
        async def run() -> Response:
            tokens = (await _body(request)).get("tokens")
            vocab = len(model.tokenizer)
            if not isinstance(tokens, list) or not all(
                    type(t) is int and 0 <= t < vocab for t in tokens):
                raise RequestError("tokens must be a list of token ids", param="tokens")
            return _json({"text": str(model.tokenizer.decode(tokens))})
        return await _guard(False, run)

    @app.post("/generate")
    async def generate(request: Request) -> Response:
        async def run() -> Response:
            body = await _body(request)
            reqs = parse_generate(state, body)
            if body.get("stream") is True:
                return _sse(generate_stream(state, reqs))
            batched = isinstance(body.get("text"), list) or (
                isinstance(body.get("input_ids"), list) and bool(body["input_ids"])
                and isinstance(body["input_ids"][0], list))
            return _json(await _until_disconnect(
                request, generate_response(state, reqs, batched)))
        return await _guard(True, run)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        async def run() -> Response:
            body = await _body(request)
            job = parse_chat(state, body, request.headers)
            if body.get("stream") is True:
                return _sse(chat_stream(state, job))
            return _json(await _until_disconnect(request, chat_response(state, job)))
        return await _guard(False, run)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        async def run() -> Response:
            body = await _body(request)
            job = parse_completion(state, body)
            if body.get("stream") is True:
                return _sse(completion_stream(state, job))
            return _json(await _until_disconnect(request, completion_response(state, job)))
        return await _guard(False, run)

    return app
