"""Session routes: create, inspect, reward, end, export, delete."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response

from ..errors import SessionNotFound
from ..sessions import SessionManager
from ..sessions.export import Style, select_sessions, trajectory
from .access import Access
from .listing import MAX_PAGE, session_page
from .schemas import CreateSessions, ExportRequest, RewardRequest

__all__ = ["admin_router"]


def admin_router(sessions: SessionManager, access: Access, *, deterministic: bool) -> APIRouter:
    router = APIRouter()
    store = sessions.store
    exporting = asyncio.Lock()  # select + mark exported, atomically per app

    @router.post("/sessions", status_code=201)
    async def create_sessions(body: CreateSessions, request: Request) -> JSONResponse:
        access.require_admin(request)
        group = await sessions.create_group(
            identity=body.identity,
            session_id=body.session_id,
            group_size=body.group_size,
            metadata=body.metadata,
            seed=body.seed,
        )
        root = str(request.base_url).rstrip("/")
        members = [
            {
                "session_id": r.session_id,
                "identity": r.identity,
                "api_key": r.api_key,
                "base_url": f"{root}/sessions/{r.session_id}/v1",
            }
            for r in group.sessions
        ]
        return JSONResponse({"group_id": group.group_id, "sessions": members}, status_code=201)

    @router.get("/sessions/{session_id}")
    async def get_session(session_id: str, request: Request) -> dict[str, Any]:
        record = await access.require_session_reader(request, session_id)
        interactions = await store.interactions(session_id)
        return {
            "session_id": record.session_id,
            "identity": record.identity,
            "group_id": record.group_id,
            "next_index": record.next_index,
            "interactions": len(interactions),
            "ended": record.ended,
            "exported": record.exported,
            "reward": record.reward,
            "metadata": record.metadata,
        }

    @router.get("/sessions")
    async def list_sessions(
        request: Request,
        group_id: str | None = Query(default=None, max_length=256),
        identity: str | None = Query(default=None, max_length=256),
        offset: int = Query(default=0, ge=0),
        limit: int = Query(default=100, ge=1, le=MAX_PAGE),
    ) -> dict[str, Any]:
        """Sessions in creation order, one page at a time; ``next_offset`` is None on
        the last page."""
        access.require_admin(request)
        return await session_page(
            store, group_id=group_id, identity=identity, offset=offset, limit=limit
        )

    @router.post("/sessions/{session_id}/reward")
    async def set_reward(session_id: str, body: RewardRequest, request: Request) -> dict[str, Any]:
        access.require_admin(request)
        await sessions.require(session_id)
        rewarded = await store.set_reward(session_id, body.reward, body.interaction_id)
        return {"session_id": session_id, "interaction_id": rewarded, "reward": body.reward}

    @router.post("/sessions/{session_id}/end")
    async def end_session(session_id: str, request: Request) -> dict[str, Any]:
        access.require_admin(request)
        await sessions.require(session_id)
        record = await store.end(session_id)
        return {"session_id": record.session_id, "ended": True}

    @router.get("/sessions/{session_id}/trajectory")
    async def get_trajectory(
        session_id: str,
        request: Request,
        wait: bool = False,
        timeout_s: float = 60.0,
        style: Style = "individual",
    ) -> dict[str, Any]:
        """``wait=true`` waits for the session to end and takes it out of later
        batch exports."""
        record = await access.require_session_reader(request, session_id)
        if wait:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + max(0.0, min(timeout_s, 3600.0))
            while not record.ended and loop.time() < deadline:
                await asyncio.sleep(0.05)
                record = await sessions.require(session_id)
            async with exporting:
                await store.mark_exported([session_id])
        return await trajectory(store, record, style)

    @router.post("/trajectories/export")
    async def export(body: ExportRequest, request: Request) -> dict[str, Any]:
        access.require_admin(request)
        chosen = await select_sessions(
            store,
            session_ids=body.session_ids,
            group_id=body.group_id,
            count=body.count,
            timeout_s=body.timeout_s,
            deterministic=deterministic,
            lock=exporting,
        )
        trajectories = [await trajectory(store, r, body.style) for r in chosen]
        if body.remove:
            for record in chosen:
                await store.delete(record.session_id)
        return {"trajectories": trajectories}

    @router.delete("/sessions/{session_id}")
    async def delete_session(session_id: str, request: Request) -> Response:
        access.require_admin(request)
        if not await store.delete(session_id):
            raise SessionNotFound(f"session {session_id!r} not found")
        return Response(status_code=204)

    return router
