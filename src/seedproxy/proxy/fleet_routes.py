"""Admin routes of the fleet's control plane: state, membership, pause, continue,
weight version, weight sync (``POST /fleet/update_weights``, from a folder on disk, and
the pass-through of SGLang's NCCL weight routes) and replay verification of a session.

Invariants:
- Every route needs the admin key (when one is set) and reads a strictly typed body
  before any server is told anything.
- Each answer names every upstream with what it said. ``paused`` and ``mode`` are the
  fleet's (the same on every replica of one Redis store); ``waiting`` counts the
  requests held at this replica.
- A weight route on which any server failed is a 502 in OpenAI's error shape naming
  them, with the list beside it; a weight sync that failed leaves the fleet paused.
- ``POST /fleet/upstreams`` adds a server once it passes the preflight on the fleet's
  weight version (409 naming every reason otherwise); ``DELETE /fleet/upstreams`` drains
  one. Both change every replica's list. Verification stops when its client leaves.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, StrictBool, StrictInt, StrictStr, model_validator

from ..errors import BadRequest, UpstreamError
from ..fleet.control import FleetControl
from ..pipeline.departure import stop_when_client_leaves
from ..pipeline.request import documented
from ..sessions.ids import check_id
from ..settings import MAX_URL_LENGTH, check_upstream_url
from .access import Access, AdminBody
from .replay import Verifier

__all__ = ["fleet_router"]


class FleetPause(AdminBody):
    mode: Literal["abort", "in_place", "retract"] = "abort"


class FleetUpstream(AdminBody):
    url: StrictStr = Field(min_length=1, max_length=MAX_URL_LENGTH)


class FleetWeightVersion(AdminBody):
    version: str = Field(min_length=1, max_length=256)
    abort_all_requests: StrictBool = False


class FleetUpdateWeights(AdminBody):
    model_path: StrictStr = Field(min_length=1, max_length=4096)
    version: StrictStr = Field(min_length=1, max_length=256)
    mode: Literal["abort", "in_place", "retract"] = "in_place"
    load_format: StrictStr | None = Field(default=None, min_length=1, max_length=64)


_GROUP = Field(default="weight_update_group", min_length=1, max_length=256)
_NAMES = Field(max_length=100_000)


class InitWeightsUpdateGroup(AdminBody):
    """SGLang's ``InitWeightsUpdateGroupReqInput``, for the whole fleet: upstream ``i``
    (in ``GET /fleet`` order) joins at ``rank_offset + i * rank_stride`` (``rank_stride``:
    the ranks one server takes, its TP size)."""

    master_address: StrictStr = Field(min_length=1, max_length=256)
    master_port: StrictInt = Field(ge=1, le=65535)
    rank_offset: StrictInt = Field(ge=0, le=1_000_000)
    world_size: StrictInt = Field(ge=1, le=1_000_000)
    group_name: StrictStr = _GROUP
    backend: StrictStr = Field(default="nccl", min_length=1, max_length=64)
    rank_stride: StrictInt = Field(default=1, ge=1, le=4096)


class DestroyWeightsUpdateGroup(AdminBody):
    group_name: StrictStr = _GROUP


class UpdateWeightsFromDistributed(AdminBody):
    names: list[StrictStr] = _NAMES
    dtypes: list[StrictStr] = _NAMES
    shapes: list[list[StrictInt]] = _NAMES
    group_name: StrictStr = _GROUP
    flush_cache: StrictBool = True
    abort_all_requests: StrictBool = False
    weight_version: StrictStr | None = Field(default=None, min_length=1, max_length=256)

    @model_validator(mode="after")
    def _one_entry_per_tensor(self) -> UpdateWeightsFromDistributed:
        if not len(self.names) == len(self.dtypes) == len(self.shapes):
            raise ValueError("names, dtypes and shapes must have one entry per tensor")
        return self


class UpdateWeightsFromTensor(AdminBody):
    serialized_named_tensors: list[StrictStr] = Field(min_length=1, max_length=4096)
    load_format: StrictStr | None = Field(default=None, min_length=1, max_length=64)
    flush_cache: StrictBool = True
    abort_all_requests: StrictBool = False
    weight_version: StrictStr | None = Field(default=None, min_length=1, max_length=256)


def fleet_router(fleet: FleetControl, verifier: Verifier, access: Access, *,
                 engine_url: str | None = None) -> APIRouter:
    """``engine_url``: the embedded engine's root URL (``engine`` in every answer)."""
    router = APIRouter()

    def state(upstreams: list[dict[str, Any]]) -> dict[str, Any]:
        return _gate_state(fleet, engine=engine_url, upstreams=upstreams)

    @router.get("/fleet")
    async def fleet_state(request: Request) -> dict[str, Any]:
        await access.require_admin(request)
        return state([report.to_dict() for report in await fleet.inspect()])

    @router.post("/fleet/upstreams", openapi_extra=documented(FleetUpstream))
    async def join(request: Request) -> JSONResponse:
        """201 with the server's report when it joined, 200 when it served already."""
        body = await access.admin_body(request, FleetUpstream)
        report, joined = await fleet.join(_upstream_url(body.url))
        return JSONResponse(report.to_dict(), status_code=201 if joined else 200)

    @router.delete("/fleet/upstreams", openapi_extra={"parameters": [{
        "name": "url", "in": "query", "required": True,
        "schema": {"type": "string", "minLength": 1, "maxLength": MAX_URL_LENGTH}}]})
    async def leave(request: Request) -> dict[str, Any]:
        """``?url=URL``: ``state`` is ``draining`` while it holds requests, then
        ``removed``."""
        await access.require_admin(request)
        urls = request.query_params.getlist("url")
        if len(urls) != 1:
            raise BadRequest("name one server: ?url=URL (its root URL)", param="url")
        upstream = await fleet.leave(_upstream_url(urls[0]))
        gone = fleet.pool.find(upstream.url) is not upstream
        return {"url": upstream.url, "state": "removed" if gone else "draining",
                "inflight": upstream.inflight}

    @router.post("/fleet/pause", openapi_extra=documented(FleetPause))
    async def pause(request: Request) -> dict[str, Any]:
        body = await access.admin_body(request, FleetPause)
        return state(await fleet.pause(body.mode))

    @router.post("/fleet/continue")
    async def resume(request: Request) -> dict[str, Any]:
        await access.require_admin(request)
        return state(await fleet.resume())

    @router.post("/fleet/weight_version", openapi_extra=documented(FleetWeightVersion))
    async def weight_version(request: Request) -> dict[str, Any]:
        body = await access.admin_body(request, FleetWeightVersion)
        return state(await fleet.set_weight_version(body.version,
                                                    abort_all=body.abort_all_requests))

    @router.post("/sessions/{session_id}/verify")
    async def verify(session_id: str, request: Request) -> dict[str, Any]:
        check_id(session_id, param="session_id")
        await access.require_admin(request)
        await access.sessions.require(session_id)
        return await stop_when_client_leaves(verifier.verify(session_id), request.receive)

    _weight_routes(router, fleet, access)
    return router


def _weight_routes(router: APIRouter, fleet: FleetControl, access: Access) -> None:
    def answer(what: str, upstreams: list[dict[str, Any]], ok: bool | None = None,
               **extra: Any) -> JSONResponse:
        """``ok``: default, every upstream's."""
        body = _gate_state(fleet, **extra, upstreams=upstreams)
        if ok if ok is not None else all(r["ok"] for r in upstreams):
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
        return answer(what, sync.upstreams, sync.ok, step=sync.step,
                      weight_version=body.version if sync.step == "continue" else None)

    def same_to_all(path: str, model: type[BaseModel]) -> None:
        @router.post(f"/fleet{path}", openapi_extra=documented(model))
        async def route(request: Request) -> JSONResponse:
            body = await access.admin_body(request, model)
            if isinstance(body, InitWeightsUpdateGroup):
                results = await fleet.pass_through(path, body.model_dump(exclude={"rank_stride"}),
                                                   rank_stride=body.rank_stride)
            else:
                results = await fleet.pass_through(path, body.model_dump())
            return answer(path.lstrip("/"), results)

    same_to_all("/update_weights_from_distributed", UpdateWeightsFromDistributed)
    same_to_all("/update_weights_from_tensor", UpdateWeightsFromTensor)
    same_to_all("/destroy_weights_update_group", DestroyWeightsUpdateGroup)
    same_to_all("/init_weights_update_group", InitWeightsUpdateGroup)


def _gate_state(fleet: FleetControl, **fields: Any) -> dict[str, Any]:
    """The fleet's ``paused`` and ``mode`` and this replica's ``waiting``, then ``fields``."""
    gate = fleet.gate
    return {"paused": gate.paused, "mode": gate.mode, "waiting": gate.waiting, **fields}


def _upstream_url(url: str) -> str:
    """``url`` checked as ``--upstream`` is (400 naming the problem)."""
    try:
        return check_upstream_url(url)
    except ValueError as exc:
        raise BadRequest(str(exc), param="url") from None
