"""SGLang's control routes on the engine: server and model info, ``/abort_request``,
``/pause_generation``, ``/continue_generation``, ``/update_weight_version``,
``/update_weights_from_disk`` and ``/flush_cache``, answering as SGLang 0.5.23.

Invariants:
- Each route validates its body before touching the worker; bad input is a 400 in
  SGLang's native error shape. No route waits for a step (``/flush_cache`` waits for the
  idle worker's next turn, and refuses a busy one with a 400).
- ``weight_version`` in the info routes is the label in effect now ("default" until
  changed).
- ``/update_weights_from_disk`` reads and checks the new weights off the worker
  (``model.prepare_update``), then swaps them in, one update at a time; weights that cannot be read
  or do not fit are refused (400) and the running ones stay.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

from fastapi import APIRouter, Request
from fastapi.responses import Response

from .errors import EngineError, RequestError
from .model import prepare_update
from .route_io import checked, json_response, route
from .state import EngineState
from .worker import PAUSE_MODES, PauseMode

__all__ = ["control_routes"]

_FLUSHED = ("Cache flushed.\nPlease check backend logs for more details. (When there are "
            "running or waiting requests, the operation will not be performed.)\n")


def _ok(message: str) -> Response:
    return json_response({"message": message, "status": "ok"})


def control_routes(state: EngineState) -> APIRouter:
    router = APIRouter()
    model, worker = state.model, state.worker
    tokenizer_path = model.model_path  # a weight update changes the weights, not this

    @router.get("/get_model_info")
    async def model_info() -> Response:
        return json_response({
            "model_path": model.model_path, "tokenizer_path": tokenizer_path,
            "is_generation": True, "preferred_sampling_params": None,
            "weight_version": worker.weight_version, "has_image_understanding": False,
            "has_audio_understanding": False, "model_type": model.arch.model_type,
            "architectures": [model.arch.hf_class],
        })

    @router.get("/get_server_info")
    async def server_info() -> Response:
        return json_response({
            "model_path": model.model_path, "enable_deterministic_inference": True,
            "sampling_backend": "pytorch", "context_length": model.context_length,
            "threads": worker.threads, "max_batch": worker.max_batch,
            "prefix_cache_mb": worker.cache_mb, "version": "seedproxy-engine",
            "weight_version": worker.weight_version, "paused": worker.paused,
            "waiting": worker.waiting, "running": worker.running,
        })

    async def flush_cache() -> Response:
        if await worker.flush_cache():
            return Response(_FLUSHED, media_type="text/plain")
        return Response("Flush cache failed.\n", status_code=400, media_type="text/plain")

    for method in ("GET", "POST"):  # one operation each: OpenAPI ids must be unique
        router.add_api_route("/flush_cache", flush_cache, methods=[method],
                             operation_id=f"flush_cache_{method.lower()}")
    _flow_routes(router, state)
    return router


def _flow_routes(router: APIRouter, state: EngineState) -> None:
    model, worker = state.model, state.worker
    updating = asyncio.Lock()

    @router.post("/abort_request")
    @route(True)
    async def abort_request(request: Request, body: dict[str, Any]) -> Response:
        """``{"rid"}`` or ``{"abort_all": true}``."""
        rid = body.get("rid")
        if body.get("abort_all") is not True and not (isinstance(rid, str) and rid):
            raise RequestError("rid must be a non-empty string (or abort_all: true)",
                               param="rid")
        worker.abort(None if body.get("abort_all") is True else rid)
        return Response(status_code=200)

    @router.post("/pause_generation")
    @route(True, empty_ok=True)
    async def pause_generation(request: Request, body: dict[str, Any]) -> Response:
        """``{"mode": "abort" | "in_place" | "retract"}`` (default abort)."""
        mode = body.get("mode", "abort")
        if mode not in PAUSE_MODES:
            raise RequestError(f"mode must be one of {', '.join(PAUSE_MODES)}, got {mode!r}",
                               param="mode")
        worker.pause(cast(PauseMode, mode))
        return _ok("Generation paused successfully.")

    @router.post("/continue_generation")
    @route(True, empty_ok=True)
    async def continue_generation(request: Request, body: dict[str, Any]) -> Response:
        worker.resume()
        return _ok("Generation continued successfully.")

    @router.post("/update_weight_version")
    @route(True)
    async def update_weight_version(request: Request, body: dict[str, Any]) -> Response:
        """``{"new_version", "abort_all_requests": true}``."""
        version = body.get("new_version")
        if not isinstance(version, str) or not version:
            raise RequestError("new_version must be a non-empty string", param="new_version")
        abort_all = checked(body, "abort_all_requests", True, bool, "a boolean")
        worker.set_weight_version(version, abort_all=abort_all)
        return json_response({"success": True, "message": f"Weight version updated to {version}",
                              "new_version": version})

    @router.post("/update_weights_from_disk")
    @route(True)
    async def update_weights_from_disk(request: Request, body: dict[str, Any]) -> Response:
        """SGLang's ``UpdateWeightFromDiskReqInput``; its GPU-only fields are ignored."""
        path = body.get("model_path")
        if not isinstance(path, str) or not path or len(path) > 4096:
            raise RequestError("model_path must be a non-empty string", param="model_path")
        load_format = checked(body, "load_format", None, str, "a string")
        abort_all = checked(body, "abort_all_requests", False, bool, "a boolean")
        version = checked(body, "weight_version", None, str, "a non-empty string",
                          nonempty=True)
        async with updating:
            try:
                runner = await asyncio.to_thread(prepare_update, path, load_format, model,
                                                 worker.max_batch)
                if abort_all:
                    worker.abort(None)
                held = await worker.load_weights(runner, version)
                if held is None:
                    raise EngineError("the engine stopped")
            except EngineError as exc:
                return json_response({"success": False, "message": str(exc),
                                      "num_paused_requests": 0}, status=400)
            model.model_path = path
            model.source_dir = str(Path(path).expanduser())
        return json_response({"success": True, "message": "Succeeded to update model weights.",
                              "num_paused_requests": held})
