"""SGLang 0.5.23's control routes for the fake server: ``/get_server_info``,
``/pause_generation``, ``/continue_generation``, ``/update_weight_version`` and
``/abort_request``, with the behaviour ``shared/notes/domain.md`` describes:

- paused in any mode, new requests wait until ``/continue_generation``;
- ``abort`` ends running requests with ``finish_reason {type: abort}`` and their partial
  output; ``in_place`` and ``retract`` hold them and resume them on continue;
- ``/update_weight_version`` sets the label; it aborts running requests unless
  ``abort_all_requests`` is false;
- each generated token records the version that produced it (``weight_versions`` spans);
- the weight routes (``/update_weights_from_disk``, ``/init_weights_update_group``,
  ``/update_weights_from_distributed``, ``/update_weights_from_tensor``,
  ``/destroy_weights_update_group``) check SGLang 0.5.23's required fields (a 422 without
  them, as FastAPI answers), record the call and answer ``{success, message}`` (plus
  ``num_paused_requests`` from disk): 200, or 400 with ``success: false`` while
  ``weights_fail`` is set; a ``weight_version`` given with a load becomes the version.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

__all__ = ["FakeControl", "Run"]

SERVER_INFO = {
    "enable_deterministic_inference": True,
    "attention_backend": "fa3",
    "disable_radix_cache": False,
    "speculative_algorithm": None,
    "sampling_backend": "pytorch",
    "version": "0.5.23",
}


@dataclass
class Run:
    """One request being generated."""

    rid: str
    aborted: bool = False
    versions: list[str] = field(default_factory=list)

    def spans(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for position, version in enumerate(self.versions):
            if out and out[-1]["version"] == version:
                out[-1]["end"] = position + 1
            else:
                out.append({"version": version, "start": position, "end": position + 1})
        return out


@dataclass
class FakeControl:
    version: str = "default"
    server_info: dict[str, Any] = field(default_factory=lambda: dict(SERVER_INFO))
    mode: str | None = None
    running: dict[str, Run] = field(default_factory=dict)
    aborted: list[str] = field(default_factory=list)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    info_status: int = 200
    """Any other status makes ``/get_server_info`` fail with it (the version unread)."""
    flushes: bool = True
    """``/flush_cache`` flushes (200), else answers 400 as SGLang does with requests running."""
    hold_at: int | None = None
    """Runs stop after this many tokens until ``release`` is set (a test's checkpoint)."""
    held: int = 0
    release: threading.Event = field(default_factory=threading.Event)
    weights_fail: str | None = None
    """When set, every weight route fails with this message (a checkpoint it refuses)."""
    weights: str = "initial"
    weights_hold: threading.Event | None = None
    """When set, ``/update_weights_from_disk`` waits for it (after ``weights_entered``)."""
    weights_entered: threading.Event = field(default_factory=threading.Event)
    """Set when a ``/update_weights_from_disk`` call arrives."""
    """The ``model_path`` last loaded from disk."""
    _open: asyncio.Event | None = None
    _counter: int = 0

    def _gate(self) -> asyncio.Event:
        if self._open is None:
            self._open = asyncio.Event()
            self._open.set()
        return self._open

    @property
    def paused(self) -> bool:
        return not self._gate().is_set()

    def start(self, rid: str | None) -> Run:
        self._counter += 1
        run = Run(rid if isinstance(rid, str) and rid else uuid.uuid4().hex)  # SGLang: a fresh uuid
        self.running[run.rid] = run
        return run

    def finish(self, run: Run) -> None:
        self.running.pop(run.rid, None)

    async def admit(self) -> None:
        """New requests wait while paused."""
        await self._gate().wait()

    async def step(self, run: Run) -> bool:
        """Before each token: False when ``run`` was aborted; waits while paused."""
        while True:
            if run.aborted:
                return False
            if not self.paused:
                return True
            await self._gate().wait()

    async def checkpoint(self, generated: int) -> None:
        """After each token: wait at ``hold_at`` until the test sets ``release``."""
        if generated != self.hold_at:
            return
        self.held += 1
        while not self.release.is_set():
            await asyncio.sleep(0.005)

    def _abort(self, run: Run) -> None:
        if not run.aborted:
            run.aborted = True
            self.aborted.append(run.rid)

    def routes(self) -> list[Route]:
        async def body_of(request: Request) -> dict[str, Any]:
            raw = await request.body()
            data = orjson.loads(raw) if raw else {}
            return data if isinstance(data, dict) else {}

        async def server_info(request: Request) -> Response:
            if self.info_status != 200:
                return JSONResponse({"error": "unavailable"}, status_code=self.info_status)
            return JSONResponse({**self.server_info, "weight_version": self.version})

        async def pause(request: Request) -> Response:
            body = await body_of(request)
            self.calls.append(("pause", body))
            self.mode = str(body.get("mode", "abort"))
            self._gate().clear()
            if self.mode == "abort":
                for run in list(self.running.values()):
                    self._abort(run)
            return JSONResponse({"success": True})

        async def resume(request: Request) -> Response:
            self.calls.append(("continue", await body_of(request)))
            self.mode = None
            self._gate().set()
            return JSONResponse({"success": True})

        async def weight_version(request: Request) -> Response:
            body = await body_of(request)
            self.calls.append(("weight_version", body))
            if body.get("abort_all_requests", True):
                for run in list(self.running.values()):
                    self._abort(run)
            self.version = str(body.get("new_version", ""))
            return JSONResponse({"success": True, "message": "ok"})

        async def abort(request: Request) -> Response:
            body = await body_of(request)
            self.calls.append(("abort", body))
            for run in list(self.running.values()):
                if body.get("abort_all") or run.rid == body.get("rid"):
                    self._abort(run)
            return Response(status_code=200)

        async def flush_cache(request: Request) -> Response:
            self.calls.append(("flush_cache", {}))
            if not self.flushes:
                return Response("Cache not flushed: requests are running.\n", status_code=400)
            return Response("Cache flushed.\n", status_code=200)

        async def model_info(request: Request) -> Response:
            return JSONResponse({"model_path": self.server_info.get("model_path", "fake"),
                                 "is_generation": True, "weight_version": self.version})

        def weight_route(name: str, required: tuple[str, ...]) -> Route:
            async def handle(request: Request) -> Response:
                body = await body_of(request)
                missing = [key for key in required if key not in body]
                if missing:
                    return JSONResponse({"detail": [{"loc": ["body", k], "type": "missing"}
                                                    for k in missing]}, status_code=422)
                self.calls.append((name, body))
                if name == "update_weights_from_disk":
                    self.weights_entered.set()
                    if self.weights_hold is not None:
                        await asyncio.to_thread(self.weights_hold.wait, 60)
                answer: dict[str, Any] = {"success": self.weights_fail is None,
                                          "message": self.weights_fail or "Succeeded."}
                if name == "update_weights_from_disk":
                    answer["num_paused_requests"] = len(self.running) if self.paused else 0
                if self.weights_fail is None:
                    if name == "update_weights_from_disk":
                        self.weights = str(body["model_path"])
                    if isinstance(body.get("weight_version"), str):
                        self.version = body["weight_version"]
                return JSONResponse(answer, status_code=200 if answer["success"] else 400)

            return Route(f"/{name}", handle, methods=["POST"])

        return [
            weight_route("update_weights_from_disk", ("model_path",)),
            weight_route("init_weights_update_group",
                         ("master_address", "master_port", "rank_offset", "world_size")),
            weight_route("update_weights_from_distributed", ("names", "dtypes", "shapes")),
            weight_route("update_weights_from_tensor", ("serialized_named_tensors",)),
            weight_route("destroy_weights_update_group", ()),
            Route("/get_server_info", server_info, methods=["GET"]),
            Route("/get_model_info", model_info, methods=["GET"]),
            Route("/flush_cache", flush_cache, methods=["GET", "POST"]),
            Route("/pause_generation", pause, methods=["POST"]),
            Route("/continue_generation", resume, methods=["POST"]),
            Route("/update_weight_version", weight_version, methods=["POST"]),
            Route("/abort_request", abort, methods=["POST"]),
        ]
