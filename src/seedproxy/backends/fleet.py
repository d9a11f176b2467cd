"""The fleet's control plane: pause and continue, weight versions, and the preflight.

Invariants:
- The fleet's state (paused, mode, abort epoch, last version set) lives on its board
  (``board.py``): the process's own for memory and SQLite stores, shared by every
  replica of a Redis store. Each change is written to the board first, then applied
  to this process's ``PauseGate``; other replicas apply it as it is published.
- Pausing writes the board and closes the gate (new requests wait there, see
  ``pause.py``) before any server is paused; in ``abort`` mode the board's abort epoch
  moves first, so a replica that sees an aborted answer finds the move on the board
  (``refresh``) even before the publication reached it. Continuing tells every server
  first, then opens the board and the gate. A board that cannot be written is a 503
  and no server is told.
- Pause, continue and weight-version changes go to every upstream; each server's answer
  is reported, and a server that did not take the change is named, never hidden.
- The weight version a server reports (``/get_server_info``) or was told
  (``/update_weight_version``, here or through another replica's board write) is kept
  on its ``Upstream``, which the pool reads at dispatch.
- ``waiting`` (requests held at the gate) is per replica.
- A weight sync (``update_weights``) is pause, load on every server, record the version,
  continue, one step after another: a step that fails on any server ends the sync there,
  with the fleet still paused, so nothing runs on mixed weights until the admin retries
  or continues. Each server is told the version with its weights, so the version it
  reports is always that of the weights it holds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from ..errors import StoreError
from .board import FleetBoard, FleetState, LocalBoard
from .pause import PauseGate, PauseMode
from .pool import Upstream, UpstreamPool
from .preflight import Finding, check_server_info

__all__ = ["FleetControl", "UpstreamReport", "WeightSync", "read_server_info"]

log = logging.getLogger("seedproxy.fleet")


@dataclass(slots=True)
class UpstreamReport:
    """What the proxy knows of one server."""

    url: str
    up: bool
    inflight: int
    weight_version: str | None = None
    checked: bool = False
    findings: list[Finding] = field(default_factory=list)
    error: str | None = None
    refused: bool = False
    degraded: bool = False
    """Its recent requests all timed out (``Upstream.degraded``)."""

    @property
    def deterministic(self) -> bool | None:
        return (not self.findings) if self.checked else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "up": self.up,
            "deterministic": self.deterministic,
            "problems": [f"{f.problem}; fix: {f.fix}" for f in self.findings],
            "weight_version": self.weight_version,
            "refused": self.refused,
            "inflight": self.inflight,
            "degraded": self.degraded,
            "error": self.error,
        }


@dataclass(slots=True)
class WeightSync:
    """How a weight sync went: ``step`` is the last one tried (``pause``, ``load``,
    ``continue``); ``upstreams`` are each server's answers to it."""

    ok: bool
    step: str
    upstreams: list[dict[str, Any]]

    @property
    def failed(self) -> list[str]:
        return [r["url"] for r in self.upstreams if not r["ok"]]


class FleetControl:
    """Fans control calls out to every upstream and keeps what they report."""

    def __init__(self, pool: UpstreamPool, gate: PauseGate, *, sglang: bool, enforce: bool,
                 timeout_s: float = 5.0, board: FleetBoard | None = None) -> None:
        self.pool = pool
        self.gate = gate
        self.board: FleetBoard = board if board is not None else LocalBoard()
        self._state = FleetState()
        self._version: str | None = None
        """The board's weight version last applied to the upstreams."""
        self.sglang = sglang
        self.enforce = enforce
        self.timeout_s = timeout_s
        self.load_timeout_s = 600.0
        """How long a server may take to load weights (or join an NCCL transfer)."""
        self._syncing = asyncio.Lock()

    async def inspect(self) -> list[UpstreamReport]:
        """Read every server's ``/get_server_info`` (SGLang only) and report. With
        ``enforce``, a server with findings is refused (no request goes to it) until a
        later inspection finds it clean; one that could not be checked keeps its state."""
        reports = await asyncio.gather(*(self._inspect_one(u) for u in self.pool.upstreams))
        for upstream, report in zip(self.pool.upstreams, reports, strict=True):
            if report.checked:
                refused = "; ".join(f.line(upstream.url) for f in report.findings) or None
                if refused and refused != upstream.refused:
                    log.warning("%s", refused if self.enforce else refused + " (allowed)")
                upstream.refused = refused if self.enforce else None
            report.refused = upstream.refused is not None
        return list(reports)

    async def inspect_forever(self, interval_s: float) -> None:
        """Inspect every ``interval_s`` until cancelled. A failed inspection is logged;
        it never ends the loop."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.inspect()
            except Exception:
                log.exception("fleet inspection failed")

    async def _inspect_one(self, upstream: Upstream) -> UpstreamReport:
        report = UpstreamReport(upstream.url, upstream.healthy, upstream.inflight,
                                upstream.weight_version, degraded=upstream.degraded)
        if self.sglang:
            await read_server_info(self.pool.client, report, self.timeout_s)
            if report.weight_version is not None:
                upstream.weight_version = report.weight_version
        return report

    def apply(self, state: FleetState) -> None:
        """Take the board's ``state`` unless a newer one was taken: the gate follows it,
        and a weight version set since the last one goes to every upstream."""
        if not state.newer_than(self._state):
            return
        self._state = state
        self.gate.apply(state.paused, state.mode, state.abort_epoch)
        if state.weight_version is not None and state.weight_version != self._version:
            self._version = state.weight_version
            for upstream in self.pool.upstreams:
                upstream.weight_version = state.weight_version

    async def refresh(self) -> None:
        """Read the whole board and apply it (``StoreError`` when it cannot be read)."""
        self.apply(await self.board.read())

    async def start(self) -> None:
        """Apply the board before serving (a replica started while the fleet is paused
        starts paused); a board that cannot be read yet is logged, ``follow`` catches up."""
        try:
            await self.refresh()
        except StoreError as exc:
            log.warning("could not read the fleet board at start: %s", exc.message)

    async def follow(self, stop: Callable[[str], None]) -> None:
        """Apply what other replicas write to the board, and call ``stop`` with each
        session whose requests are to stop, until cancelled."""
        await self.board.follow(self.apply, stop)

    async def pause(self, mode: PauseMode) -> list[dict[str, Any]]:
        """Hold new requests on every replica, then pause every server in ``mode``."""
        self.apply(await self.board.pause(mode))
        return await self._fan_out("/pause_generation", {"mode": mode})

    async def resume(self) -> list[dict[str, Any]]:
        """Continue every server, then let held requests go on every replica."""
        try:
            return await self._fan_out("/continue_generation", {})
        finally:
            self.apply(await self.board.resume())

    async def set_weight_version(self, version: str, *, abort_all: bool) -> list[dict[str, Any]]:
        body = {"new_version": version, "abort_all_requests": abort_all}
        if abort_all:
            self.apply(await self.board.abort())
        results = await self._fan_out("/update_weight_version", body)
        taken = False
        for upstream, result in zip(self.pool.upstreams, results, strict=True):
            if result["ok"]:
                upstream.weight_version = version
                taken = True
        if taken:  # set here per server: applying it below changes no upstream here
            await self._record_version(version)
        return results

    async def update_weights(self, model_path: str, version: str, mode: PauseMode,
                             load_format: str | None) -> WeightSync:
        """Pause in ``mode``, load ``model_path`` on every server (concurrently), record
        ``version``, continue; stop at the first step that fails on any server."""
        async with self._syncing:
            paused = await self.pause(mode)
            if not all(r["ok"] for r in paused):
                return WeightSync(False, "pause", paused)
            body: dict[str, Any] = {"model_path": model_path, "weight_version": version,
                                    "abort_all_requests": False}
            if load_format is not None:
                body["load_format"] = load_format
            loads = await self._fan_out("/update_weights_from_disk", body,
                                        timeout_s=self.load_timeout_s, answers=True)
            for upstream, result in zip(self.pool.upstreams, loads, strict=True):
                if result["ok"]:
                    upstream.weight_version = version
            if not all(r["ok"] for r in loads):
                return WeightSync(False, "load", loads)
            await self._record_version(version)
            resumed = await self.resume()
            if not all(r["ok"] for r in resumed):
                return WeightSync(False, "continue", resumed)
            return WeightSync(True, "continue", loads)

    async def pass_through(self, path: str, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Send ``bodies[i]`` to upstream ``i`` (all at once: an NCCL transfer needs every
        server in it together); a ``weight_version`` that every server took is recorded."""
        results = await self._fan_out(path, bodies, timeout_s=self.load_timeout_s,
                                      answers=True)
        version = bodies[0].get("weight_version") if bodies else None
        if isinstance(version, str) and all(r["ok"] for r in results):
            for upstream in self.pool.upstreams:
                upstream.weight_version = version
            await self._record_version(version)
        return results

    async def _record_version(self, version: str) -> None:
        """The fleet's version is ``version`` (its servers were told already)."""
        self._version = version
        self.apply(await self.board.set_weight_version(version))

    async def _fan_out(self, path: str, body: dict[str, Any] | list[dict[str, Any]], *,
                       timeout_s: float | None = None, answers: bool = False
                       ) -> list[dict[str, Any]]:
        """POST ``body`` (or ``body[i]`` to upstream ``i``) to every upstream; with
        ``answers``, each result carries the server's JSON answer (None if not JSON)."""
        bodies = body if isinstance(body, list) else [body] * len(self.pool.upstreams)

        async def one(upstream: Upstream, sent: dict[str, Any]) -> dict[str, Any]:
            try:
                response = await self.pool.client.post(
                    upstream.url + path, json=sent, timeout=timeout_s or self.timeout_s
                )
            except httpx.HTTPError as exc:
                result: dict[str, Any] = {"url": upstream.url, "ok": False, "status": None,
                                          "error": f"unreachable: {type(exc).__name__}"}
                return {**result, "answer": None} if answers else result
            ok = response.status_code == 200
            result = {"url": upstream.url, "ok": ok, "status": response.status_code,
                      "error": None if ok else response.text[:500]}
            if answers:
                try:
                    result["answer"] = response.json()
                except ValueError:
                    result["answer"] = None
                if ok and isinstance(result["answer"], dict) and \
                        result["answer"].get("success") is False:
                    result["ok"], result["error"] = False, str(
                        result["answer"].get("message"))[:500]
            return result

        return list(await asyncio.gather(
            *(one(u, b) for u, b in zip(self.pool.upstreams, bodies, strict=True))))


async def read_server_info(
    client: httpx.AsyncClient, report: UpstreamReport, timeout_s: float
) -> None:
    """Fill ``report`` from the server's ``/get_server_info``: its findings and weight
    version, or why it could not be checked."""
    try:
        response = await client.get(report.url + "/get_server_info", timeout=timeout_s)
    except httpx.HTTPError as exc:
        report.up = False
        report.error = f"unreachable: {type(exc).__name__}"
        return
    if response.status_code != 200:
        report.error = f"/get_server_info answered {response.status_code}"
        return
    try:
        info = response.json()
    except ValueError:
        info = None
    report.checked = True
    report.findings = check_server_info(info)
    version = info.get("weight_version") if isinstance(info, dict) else None
    if isinstance(version, str):
        report.weight_version = version
