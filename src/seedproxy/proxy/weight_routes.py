"""Admin routes that move weights onto the fleet: ``POST /fleet/update_weights`` (the
whole sync from a folder on disk) and the pass-through of SGLang's NCCL weight routes.

Invariants:
- Every route needs the admin key (when one is set) and reads a strictly typed body
  before any server is told anything.
- Each answer lists every upstream with what it said. When any server failed, it is a
  502 in OpenAI's error shape naming them, with the list beside it; a weight sync that
  failed leaves the fleet paused.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from ..errors import UpstreamError
from ..fleet.control import FleetControl
from ..pipeline.request import documented
from .access import Access
from .fleet_routes import gate_state
from .schemas import (
    DestroyWeightsUpdateGroup,
    FleetUpdateWeights,
    InitWeightsUpdateGroup,
    UpdateWeightsFromDistributed,
    UpdateWeightsFromTensor,
)

__all__ = ["weight_router"]


def weight_router(fleet: FleetControl, access: Access) -> APIRouter:
    router = APIRouter()

    def answer(what: str, ok: bool, upstreams: list[dict[str, Any]],
               **extra: Any) -> JSONResponse:
        body = gate_state(fleet, **extra, upstreams=upstreams)
        if ok:
            return JSONResponse(body)
        failed = ", ".join(f"{r['url']} ({r['error']})" for r in upstreams if not r["ok"])
        error = UpstreamError(f"{what} failed on {failed}")
        return JSONResponse({**error.body(), **body}, status_code=error.status_code)

    @router.post("/fleet/update_weights", openapi_extra=documented(FleetUpdateWeights))
    async def update_weights(request: Request) -> JSONResponse:
        body = await access.admin_body(request, FleetUpdateWeights)
        sync = await fleet.update_weights(body.model_path, body.version, body.mode,
                                          body.load_format)
        what = {"pause": "pausing for the weight sync",
                "load": "loading the weights (the fleet stays paused: retry, or "
                        "POST /fleet/continue)",
                "continue": "continuing after the weight sync"}[sync.step]
        return answer(what, sync.ok, sync.upstreams, step=sync.step,
                      weight_version=body.version if sync.step == "continue" else None)

    def same_to_all(path: str, model: type[BaseModel]) -> None:
        @router.post(f"/fleet{path}", openapi_extra=documented(model))
        async def route(request: Request) -> JSONResponse:
            body = (await access.admin_body(request, model)).model_dump()
            results = await fleet.pass_through(path, body)
            return answer(path.lstrip("/"), all(r["ok"] for r in results), results)

    same_to_all("/update_weights_from_distributed", UpdateWeightsFromDistributed)
    same_to_all("/update_weights_from_tensor", UpdateWeightsFromTensor)
    same_to_all("/destroy_weights_update_group", DestroyWeightsUpdateGroup)

    @router.post("/fleet/init_weights_update_group",
                 openapi_extra=documented(InitWeightsUpdateGroup))
    async def init_group(request: Request) -> JSONResponse:
        body = await access.admin_body(request, InitWeightsUpdateGroup)
        results = await fleet.pass_through("/init_weights_update_group",
                                           body.model_dump(exclude={"rank_stride"}),
                                           rank_stride=body.rank_stride)
        return answer("init_weights_update_group", all(r["ok"] for r in results), results)

    return router
