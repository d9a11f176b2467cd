"""SGLang's control routes on the engine: server and model info, ``/abort_request``,
``/pause_generation``, ``/continue_generation`` and ``/update_weight_version``.

Invariants:
- Each route validates its body before touching the worker; bad input is a 400 in
  SGLang's native error shape (``{"error": {"message"}}``).
- The routes only set the worker's state (``worker.py``); they never wait for a step.
- ``weight_version`` in the info routes is the label in effect now ("default" until
  ``/update_weight_version`` changes it). The engine has no weights to load: the label
  is all that SGLang's route changes too.
- Answers are SGLang 0.5.23's: pause and continue ``{"message", "status": "ok"}``;
  update_weight_version ``{"success": true, "message", "new_version"}``.
"""

from __future__ import annotations

from typing import Any, cast

from fastapi import APIRouter, Request
from fastapi.responses import Response

from .errors import RequestError
from .routing import guard, json_response, read_body
from .state import EngineState
from .worker import PAUSE_MODES, PauseMode

__all__ = ["control_routes"]


def _pause_mode(body: dict[str, Any]) -> PauseMode:
    mode = body.get("mode", "abort")
    if mode not in PAUSE_MODES:
        raise RequestError(f"mode must be one of {', '.join(PAUSE_MODES)}, got {mode!r}",
                           param="mode")
    return cast(PauseMode, mode)


def _new_version(body: dict[str, Any]) -> tuple[str, bool]:
    version = body.get("new_version")
    if not isinstance(version, str) or not version:
        raise RequestError("new_version must be a non-empty string", param="new_version")
    abort_all = body.get("abort_all_requests", True)
    if not isinstance(abort_all, bool):
        raise RequestError("abort_all_requests must be a boolean",
                           param="abort_all_requests")
    return version, abort_all


def control_routes(state: EngineState) -> APIRouter:
    """The control routes over ``state.worker``."""
    router = APIRouter()
    model, worker = state.model, state.worker

    @router.get("/get_model_info")
    async def model_info() -> Response:
        return json_response({
            "model_path": model.model_path, "tokenizer_path": model.model_path,
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

    @router.post("/abort_request")
    async def abort_request(request: Request) -> Response:
        """SGLang's ``/abort_request``: ``{"rid"}`` or ``{"abort_all": true}``."""
        async def run() -> Response:
            body = await read_body(request)
            rid = body.get("rid")
            if body.get("abort_all") is True:
                worker.abort(None)
            elif isinstance(rid, str) and rid:
                worker.abort(rid)
            else:
                raise RequestError("rid must be a non-empty string (or abort_all: true)",
                                   param="rid")
            return Response(status_code=200)

        return await guard(True, run)

    @router.post("/pause_generation")
    async def pause_generation(request: Request) -> Response:
        """``{"mode": "abort" | "in_place" | "retract"}`` (default abort)."""
        async def run() -> Response:
            worker.pause(_pause_mode(await read_body(request, empty_ok=True)))
            return json_response({"message": "Generation paused successfully.",
                                  "status": "ok"})

        return await guard(True, run)

    @router.post("/continue_generation")
    async def continue_generation(request: Request) -> Response:
        async def run() -> Response:
            await read_body(request, empty_ok=True)
            worker.resume()
            return json_response({"message": "Generation continued successfully.",
                                  "status": "ok"})

        return await guard(True, run)

    @router.post("/update_weight_version")
    async def update_weight_version(request: Request) -> Response:
        """``{"new_version", "abort_all_requests": true}``."""
        async def run() -> Response:
            version, abort_all = _new_version(await read_body(request))
            worker.set_weight_version(version, abort_all=abort_all)
            return json_response({"success": True,
                                  "message": f"Weight version updated to {version}",
                                  "new_version": version})

        return await guard(True, run)

    return router
