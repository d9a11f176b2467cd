"""Admin routes of the fleet's control plane: state, pause, continue, weight version,
and replay verification of a session.

Every route needs the admin key (when one is set). Each answer names every upstream
with what it said, so a server that did not take a change is never hidden. ``paused``
and ``mode`` are the fleet's, the same on every replica of one Redis store (told
through any of them); ``waiting`` counts the requests held at this replica.
Verification runs one per upstream at a time (429 beyond, ``replay.Verifier``), and
stops when its client leaves.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from ..backends.fleet import FleetControl
from ..pipeline.departure import stop_when_client_leaves
from ..pipeline.request import documented, read_model
from ..sessions.ids import check_id
from .access import Access
from .replay import Verifier
from .schemas import FleetPause, FleetWeightVersion

__all__ = ["fleet_router"]


def fleet_router(
    fleet: FleetControl, verifier: Verifier, access: Access, *, max_body_bytes: int,
    engine_url: str | None = None,
) -> APIRouter:
    """``engine_url``: the embedded engine's root URL (``engine`` in every answer; None
    with ``--upstream``), what ``seedproxy verify-logprobs`` teacher-forces through."""
    router = APIRouter()

    def state(upstreams: list[dict[str, Any]]) -> dict[str, Any]:
        gate = fleet.gate
        return {"paused": gate.paused, "mode": gate.mode, "waiting": gate.waiting,
                "engine": engine_url, "upstreams": upstreams}

    @router.get("/fleet")
    async def fleet_state(request: Request) -> dict[str, Any]:
        await access.require_admin(request)
        return state([report.to_dict() for report in await fleet.inspect()])

    @router.post("/fleet/pause", openapi_extra=documented(FleetPause))
    async def pause(request: Request) -> dict[str, Any]:
        await access.require_admin(request)
        body = await read_model(request, FleetPause, max_body_bytes)
        return state(await fleet.pause(body.mode))

    @router.post("/fleet/continue")
    async def resume(request: Request) -> dict[str, Any]:
        await access.require_admin(request)
        return state(await fleet.resume())

    @router.post("/fleet/weight_version", openapi_extra=documented(FleetWeightVersion))
    async def weight_version(request: Request) -> dict[str, Any]:
        await access.require_admin(request)
        body = await read_model(request, FleetWeightVersion, max_body_bytes)
        results = await fleet.set_weight_version(body.version, abort_all=body.abort_all_requests)
        return state(results)

    @router.post("/sessions/{session_id}/verify")
    async def verify(session_id: str, request: Request) -> dict[str, Any]:
        check_id(session_id, param="session_id")
        await access.require_admin(request)
        await access.sessions.require(session_id)
        # A client that leaves stops the replay: nothing more is sent upstream.
        return await stop_when_client_leaves(verifier.verify(session_id), request.receive)

    return router
