"""Session routes: create, inspect, list, reward, end, export, delete. Every route
checks auth first, then reads its body (413 past ``--max-body-bytes``) and checks the
path's session id (400).

``GET /sessions`` answers a bounded page of session summaries, read from one of the
store's indexes (creation order, group, identity), so it costs ``limit`` records (plus
``offset``; a ``cursor``, the page before's ``next_cursor``, costs nothing) whatever the
store holds. ``since`` (an earlier ``version``) answers ``{"version", "changed": false}``
alone while nothing changed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import Field, StrictBool

from ..errors import BatchNotFound, Forbidden, SessionNotFound, WaitTimeout
from ..pipeline.inflight import InFlight
from ..pipeline.request import documented, read_model
from ..sessions import SessionManager, SessionRecord, SessionStore
from ..sessions.export import Style, lease_batch, trajectory
from ..sessions.ids import check_id, encode_id
from ..sessions.manager import replay_options
from ..sessions.store.base import View
from .access import Access, AdminBody

__all__ = ["Admin", "admin_router", "session_page"]

MAX_PAGE = 500
SEQ_MAX = 2**62
"""The largest ``cursor``/``since`` taken: sequence numbers and versions stay below."""


class ForkFrom(AdminBody):
    session: str = Field(min_length=1, max_length=256)
    at: int = Field(ge=0, lt=2**53)


class CreateSessions(AdminBody):
    session_id: str | None = Field(default=None, min_length=1, max_length=256)
    identity: str | None = Field(default=None, min_length=1, max_length=256)
    group_size: int = Field(default=1, ge=1, le=4096)
    metadata: dict[str, Any] | None = None
    seed: int | None = Field(default=None, ge=-(2**63), lt=2**63)
    index_by: Literal["arrival", "content"] | None = None
    resume: str | None = Field(default=None, min_length=1, max_length=256)
    """Replay this recorded session: matching requests are answered from its record."""
    fork: ForkFrom | None = None
    """Replay the first ``at`` interactions of ``session``, then sample with new seeds."""


class RewardRequest(AdminBody):
    reward: float = Field(allow_inf_nan=False)
    interaction_id: str | None = None


class ExportRequest(AdminBody):
    session_ids: list[str] | None = None
    group_id: str | None = None
    count: int | None = Field(default=None, ge=1)
    timeout_s: float = Field(default=0.0, ge=0, le=3600)
    remove: StrictBool = False
    style: Literal["individual", "concat"] = "individual"
    visibility_timeout_s: float = Field(default=300.0, gt=0, le=86400)
    """How long the batch stays leased without an ack before it is exported again."""
    skip_abandoned: StrictBool = False
    """Lease sessions ended as abandoned with the batch, but deliver none of them."""


class AckRequest(AdminBody):
    batch_id: str = Field(min_length=1, max_length=256)


@dataclass(frozen=True)
class Admin:
    """``abandon_after_s``: see ``sessions/selection.py``. ``clock``: wall-clock seconds,
    for leases and idleness. ``exporting``: select + lease, one at a time per app (the
    store's lease is atomic across apps: this only saves a replica racing itself)."""

    sessions: SessionManager
    access: Access
    deterministic: bool
    inflight: InFlight
    abandon_after_s: float | None = None
    clock: Callable[[], float] = time.time
    exporting: asyncio.Lock = field(default_factory=asyncio.Lock)


def admin_router(admin: Admin) -> APIRouter:
    router = APIRouter()
    for add in (_session_routes, _session_change_routes, _trajectory_route, _export_routes):
        add(router, admin)
    return router


def _session_routes(router: APIRouter, admin: Admin) -> None:
    access, store = admin.access, admin.sessions.store

    @router.post("/sessions", status_code=201, openapi_extra=documented(CreateSessions))
    async def create_sessions(request: Request) -> JSONResponse:
        body = await access.admin_body(request, CreateSessions)
        replay = await replay_options(
            store, resume=body.resume,
            fork=(body.fork.session, body.fork.at) if body.fork is not None else None,
            identity=body.identity, group_size=body.group_size, index_by=body.index_by,
            seed=body.seed, session_id=body.session_id)
        group = await admin.sessions.create_group(
            identity=replay.identity, session_id=body.session_id, group_size=body.group_size,
            metadata=body.metadata, seed=replay.seed, index_by=replay.index_by,
            replays=replay.replays)
        root = str(request.base_url).rstrip("/")
        members = [{"session_id": r.session_id, "identity": r.identity, "api_key": r.api_key,
                    "base_url": f"{root}/sessions/{encode_id(r.session_id)}/v1"}
                   for r in group.sessions]
        return JSONResponse({"group_id": group.group_id, "sessions": members}, status_code=201)

    @router.get("/sessions/{session_id}")
    async def get_session(session_id: str, request: Request) -> dict[str, Any]:
        check_id(session_id, param="session_id")
        record = await access.require_session_reader(request, session_id)
        interactions = await store.interactions(session_id)
        return {"session_id": record.session_id, "identity": record.identity,
                "group_id": record.group_id, "next_index": record.next_index,
                "index_by": record.index_by, "interactions": len(interactions),
                "ended": record.ended, "end_status": record.end_status,
                "exported": record.exported, "reward": record.reward,
                "metadata": record.metadata, "replays": record.replays,
                "store_epoch": record.store_epoch}

    @router.get("/sessions")
    async def list_sessions(
        request: Request,
        group_id: str | None = Query(default=None, max_length=256),
        identity: str | None = Query(default=None, max_length=256),
        offset: int = Query(default=0, ge=0, le=10**12),
        limit: int = Query(default=100, ge=1, le=MAX_PAGE),
        cursor: int | None = Query(default=None, ge=0, le=SEQ_MAX),
        since: int | None = Query(default=None, ge=0, le=SEQ_MAX),
    ) -> dict[str, Any]:
        await access.require_admin(request)
        return await session_page(store, group_id=group_id, identity=identity, offset=offset,
                                  limit=limit, cursor=cursor, since=since)


def _session_change_routes(router: APIRouter, admin: Admin) -> None:
    access, sessions, store = admin.access, admin.sessions, admin.sessions.store

    @router.post("/sessions/{session_id}/reward", openapi_extra=documented(RewardRequest))
    async def set_reward(session_id: str, request: Request) -> dict[str, Any]:
        await access.require_admin(request)
        check_id(session_id, param="session_id")
        body = await read_model(request, RewardRequest, access.max_body_bytes)
        await sessions.require(session_id)
        rewarded = await store.set_reward(session_id, body.reward, body.interaction_id)
        return {"session_id": session_id, "interaction_id": rewarded, "reward": body.reward}

    @router.post("/sessions/{session_id}/end")
    async def end_session(session_id: str, request: Request) -> dict[str, Any]:
        await access.require_admin(request)
        check_id(session_id, param="session_id")
        await sessions.require(session_id)
        record = await store.end(session_id)
        return {"session_id": record.session_id, "ended": True}

    @router.delete("/sessions/{session_id}")
    async def delete_session(session_id: str, request: Request) -> Response:
        await access.require_admin(request)
        check_id(session_id, param="session_id")
        # Its requests in flight stop first, on every replica; their answers then find
        # no session to be recorded in.
        await admin.inflight.delete_session(session_id)
        if not await store.delete(session_id):
            raise SessionNotFound(f"session {session_id!r} not found")
        return Response(status_code=204)


def _trajectory_route(router: APIRouter, admin: Admin) -> None:

    @router.get("/sessions/{session_id}/trajectory")
    async def get_trajectory(
        session_id: str,
        request: Request,
        wait: bool = False,
        timeout_s: float = Query(default=60.0, gt=0, le=3600.0),
        style: Style = "individual",
        visibility_timeout_s: float = Query(default=300.0, gt=0, le=86400.0),
    ) -> Response:
        """``wait=true`` (the admin's act): see ``_lease_when_ended``; acknowledged, the
        session is out of later batch exports."""
        check_id(session_id, param="session_id")
        record = await admin.access.require_session_reader(request, session_id)
        if not wait:
            answer: Any = await trajectory(admin.sessions.store, record, style)
        elif not admin.access.may_export(request):
            raise Forbidden("wait=true takes the trajectory out of batch export: "
                            "that needs the admin key", param="wait")
        else:
            answer = await _lease_when_ended(admin, session_id, timeout_s, style,
                                             visibility_timeout_s)
        return Response(orjson.dumps(answer), media_type="application/json")


async def _lease_when_ended(admin: Admin, session_id: str, timeout_s: float, style: Style,
                            visibility_timeout_s: float) -> dict[str, Any]:
    """Wait (woken by the store) until the session has ended and no other export holds
    it, then lease it as a batch of one: its trajectory with ``batch_id``. Past
    ``timeout_s``, ``WaitTimeout`` (504) and nothing is taken."""
    store, clock = admin.sessions.store, admin.clock
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    built: list[dict[str, Any]] = []

    async def build(chosen: list[SessionRecord]) -> None:
        # The whole answer, serialisable, before anything is leased.
        built[:] = [dict(await trajectory(store, r, style)) for r in chosen]
        orjson.dumps(built)

    async with store.watch() as watch:
        while True:
            record = await admin.sessions.require(session_id)
            held = await store.held_until([session_id], clock())
            if record.ended and not held:
                leased = await lease_batch(
                    store, session_ids=[session_id], lock=admin.exporting,
                    visibility_timeout_s=visibility_timeout_s, prepare=build, clock=clock)
                if leased.sessions:
                    return {**built[0], "batch_id": leased.batch_id}
                continue  # another export leased it meanwhile: wait on
            left = deadline - loop.time()
            if left <= 0:
                raise WaitTimeout(f"session {session_id!r} did not end within {timeout_s} s")
            ends = [until - clock() for until in held.values()]
            await watch.wait(min([left, *ends]))


def _export_routes(router: APIRouter, admin: Admin) -> None:
    access, store, clock = admin.access, admin.sessions.store, admin.clock

    @router.post("/trajectories/export", openapi_extra=documented(ExportRequest))
    async def export(request: Request) -> Response:
        """Lease a batch (see ``sessions/export.py``): it is exported again after
        ``visibility_timeout_s`` unless ``POST /trajectories/ack`` names it first."""
        body = await access.admin_body(request, ExportRequest)
        built: list[bytes] = []

        async def build(chosen: list[SessionRecord]) -> None:
            # The whole answer, serialised, before anything is leased: a record that
            # cannot be encoded fails this export and leases nothing.
            trajectories = []
            for record in chosen:
                try:
                    trajectories.append(await trajectory(store, record, body.style))
                except SessionNotFound:  # deleted since it was chosen: nothing to deliver
                    continue
            built[:] = [orjson.dumps(trajectories)]

        leased = await lease_batch(
            store, session_ids=body.session_ids, group_id=body.group_id, count=body.count,
            timeout_s=body.timeout_s, deterministic=admin.deterministic, lock=admin.exporting,
            visibility_timeout_s=body.visibility_timeout_s, remove=body.remove,
            abandon_after_s=admin.abandon_after_s, skip_abandoned=body.skip_abandoned,
            clock=clock, prepare=build)
        status = {"batch_id": leased.batch_id, "open_sessions": await store.count_open(),
                  "waiting_on": _waiting_on(leased.waiting, clock(), admin.abandon_after_s),
                  "skipped": [r.session_id for r in leased.skipped]}
        content = orjson.dumps(status)[:-1] + b',"trajectories":' + built[0] + b"}"
        return Response(content, media_type="application/json")

    @router.post("/trajectories/ack", openapi_extra=documented(AckRequest))
    async def ack(request: Request) -> dict[str, Any]:
        """The exporter has the batch: its sessions leave later exports (``remove``:
        they are deleted now). Idempotent, and still accepted after the lease ran out."""
        body = await access.admin_body(request, AckRequest)
        if not await store.ack(body.batch_id, clock()):
            raise BatchNotFound(f"batch {body.batch_id!r} not found (or forgotten)",
                           param="batch_id")
        return {"batch_id": body.batch_id, "acknowledged": True}


def _waiting_on(waiting: list[SessionRecord], now: float,
                abandon_after_s: float | None) -> list[dict[str, Any]]:
    """The open sessions a deterministic export stopped at: idle for how long, and
    ended as abandoned in how long (None: never)."""
    return [{"session_id": r.session_id, "idle_s": round(max(0.0, now - r.last_active_at), 1),
             "abandoned_in_s": None if abandon_after_s is None else
             round(max(0.0, r.last_active_at + abandon_after_s - now), 1)}
            for r in waiting]


async def session_page(store: SessionStore, *, group_id: str | None, identity: str | None,
                       offset: int, limit: int, cursor: int | None = None,
                       since: int | None = None) -> dict[str, Any]:
    version = await store.version()  # before the page: a later change moves it again
    if since is not None and since == version:
        return {"version": version, "changed": False}
    after = -1 if cursor is None else cursor
    if identity is not None and group_id is not None:
        # Both: one identity's few sessions, filtered by group.
        every = await store.scan("identity", key=identity,
                                 limit=await store.count("identity", key=identity))
        matching = [r for r in every if r.group_id == group_id]
        rest = [r for r in matching if r.created_seq > after]
        records, more = rest[offset : offset + limit], len(rest) > offset + limit
        total = len(matching)
    else:
        view: View = ("identity" if identity is not None
                      else "group" if group_id is not None else "all")
        key = identity if identity is not None else group_id
        found = await store.scan(view, key=key, after=after, offset=offset, limit=limit + 1)
        records, more = found[:limit], len(found) > limit
        total = await store.count(view, key=key)
    answer = {"sessions": [await _summary(store, r) for r in records], "total": total,
              "next_offset": offset + len(records) if more and cursor is None else None,
              "next_cursor": records[-1].created_seq if more else None, "version": version}
    return answer if since is None else {**answer, "changed": True}


async def _summary(store: SessionStore, record: SessionRecord) -> dict[str, Any]:
    if record.interaction_count is None:  # stored before summaries were kept
        interactions = await store.interactions(record.session_id)
        last: dict[str, Any] = dict(interactions[-1].to_dict()) if interactions else {}
        count, upstream, version = len(interactions), last.get("upstream"), last.get(
            "weight_version")
    else:
        count = record.interaction_count
        upstream, version = record.last_upstream, record.last_weight_version
    summary: dict[str, Any] = {
        "session_id": record.session_id, "identity": record.identity,
        "group_id": record.group_id, "interactions": count,
        # exported wins over ended: an exported session is ended or taken by name
        "state": "exported" if record.exported else "ended" if record.ended else "open",
        "reward": record.reward, "upstream": upstream, "metadata": record.metadata}
    if version is not None:
        summary["weight_version"] = version
    return summary
