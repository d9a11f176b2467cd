"""The fleet's control plane: pause and continue, weight versions, membership, and the
preflight.

Invariants:
- Each change is written to the fleet's board (``board.py``) first, then applied to
  this process's ``PauseGate``; other replicas apply it as it is published. A board
  that cannot be written is a 503 and no server is told.
- Changes go to every upstream; each server's answer is reported, and a server that
  did not take the change is named, never hidden.
- The weight version a server reports or was told (here or through another replica's
  board write) is kept on its ``Upstream``, which the pool reads at dispatch.
- Membership is board state too (``members_of``), followed by every replica, one
  started later included.
- Every fan-out and inspection works on one snapshot of the list of servers, so a
  change of membership while it awaits never mismatches servers and answers.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import BadRequest, Conflict, StoreError, UpstreamError, UpstreamNotFound
from ..transport.failure import cause
from ..transport.loop import LOOPED
from .board import FleetBoard, FleetState
from .pool import UpstreamPool
from .server_report import UpstreamReport, join_refusal, read_server_info
from .state import PauseGate, PauseMode
from .upstream import Upstream

__all__ = ["FleetControl", "WeightSync"]

log = logging.getLogger("seedproxy.fleet")


@dataclass(slots=True)
class WeightSync:
    """How a weight sync went: ``step`` is the last one tried (``pause``, ``load``,
    ``continue``); ``upstreams`` are each server's answers to it."""

    ok: bool
    step: str
    upstreams: list[dict[str, Any]]


class FleetControl:
    """Fans control calls out to every upstream and keeps what they report."""

    def __init__(self, pool: UpstreamPool, gate: PauseGate, *, server_info: bool, enforce: bool,
                 board: FleetBoard) -> None:
        """``server_info``: the upstreams answer ``/get_server_info``."""
        self.pool = pool
        self._startup = [u.url for u in pool.upstreams]
        """This replica's ``--upstream`` list, which the board's membership amends."""
        self.gate = gate
        self.board = board
        self._state = FleetState()
        self._version: str | None = None
        """The board's weight version last applied to the upstreams."""
        self.server_info = server_info
        self.enforce = enforce
        self.timeout_s = 5.0
        self.load_timeout_s = 600.0
        """How long a server may take to load weights (or join an NCCL transfer)."""

    async def inspect(self) -> list[UpstreamReport]:
        """Read every server's ``/get_server_info`` (where ``server_info``) and report. With
        ``enforce``, a server with findings is refused until a later inspection finds it
        clean; one that could not be checked keeps its state."""
        upstreams = self.pool.upstreams
        reports = await asyncio.gather(*(self._inspect_one(u) for u in upstreams))
        for upstream, report in zip(upstreams, reports, strict=True):
            if report.checked:
                refused = "; ".join(f.line(upstream.url) for f in report.findings) or None
                if refused and refused != upstream.refused:
                    log.warning("%s", refused if self.enforce else refused + " (allowed)")
                upstream.refused = refused if self.enforce else None
            report.refused = upstream.refused is not None
        return list(reports)

    async def inspect_forever(self, interval_s: float) -> None:
        """Inspect every ``interval_s`` until cancelled; a failure is logged, never ends it."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.inspect()
            except Exception:
                log.exception("fleet inspection failed")

    async def _inspect_one(self, upstream: Upstream) -> UpstreamReport:
        report = UpstreamReport(upstream.url, upstream.healthy, upstream.inflight,
                                upstream.weight_version, degraded=upstream.degraded,
                                draining=upstream.draining)
        if self.server_info:
            await read_server_info(self.pool.client, report, self.timeout_s)
            if report.weight_version is not None:
                upstream.weight_version = report.weight_version
        return report

    def apply(self, state: FleetState) -> None:
        """Take the board's ``state`` unless a newer one was taken: the gate follows it,
        a weight version set since the last one goes to every upstream, and the list
        of upstreams becomes the board's membership."""
        if not state.newer_than(self._state):
            return
        self._state = state
        self.gate.apply(state.paused, state.mode, state.abort_epoch)
        if state.weight_version is not None and state.weight_version != self._version:
            self._version = state.weight_version
            for upstream in self.pool.upstreams:
                upstream.weight_version = state.weight_version
        self.pool.set_members(state.members_of(self._startup),  # a joining server was
                              weight_version=self.weight_version())  # checked to be on it

    def weight_version(self) -> str | None:
        """The fleet's weight version: the one last set on the board, else the one
        every serving upstream last reported (None when they differ or none did)."""
        if self._state.weight_version is not None:
            return self._state.weight_version
        known = {u.weight_version for u in self.pool.upstreams if not u.draining}
        return known.pop() if len(known) == 1 else None

    async def join(self, url: str) -> tuple[UpstreamReport, bool]:
        """Add ``url`` to the fleet on every replica once ``join_refusal`` passes it. A
        server already in the fleet under another spelling (``server_key``) is that
        member. Returns its report and whether it joined now (False: it was serving)."""
        current = self.pool.find(url)
        if current is not None and not current.draining:
            return await self._inspect_one(current), False
        url = current.url if current is not None else url  # one server, one spelling
        report = UpstreamReport(url, True, 0)
        if self.server_info:
            await read_server_info(self.pool.client, report, self.timeout_s)
        else:
            report.error = await self.pool.check(url)
            report.up, report.looped = report.error is None, report.error == LOOPED
        join_refusal(report, server_info=self.server_info, enforce=self.enforce,
                     fleet_version=self.weight_version())
        if report.findings:
            log.warning("%s (allowed)", "; ".join(f.line(url) for f in report.findings))
        self.apply(await self.board.set_member(url, True))
        joined = self.pool.find(url)
        assert joined is not None  # the board's membership names it now
        if report.weight_version is not None:
            joined.weight_version = report.weight_version
        report.inflight = joined.inflight
        return report, True

    async def leave(self, url: str) -> Upstream:
        """Take ``url`` out of the fleet on every replica: it drains, then is forgotten.
        ``UpstreamNotFound`` for a server not in the fleet, ``Conflict`` for the last one
        serving. Returns it, draining (already forgotten when it held nothing)."""
        upstream = self.pool.find(url)
        if upstream is None:
            raise UpstreamNotFound(f"{url} is not one of the fleet's upstreams", param="url")
        if upstream.draining:
            return upstream
        if all(u.draining for u in self.pool.upstreams if u is not upstream):
            raise Conflict(f"{url} is the fleet's last upstream: add another one first",
                           param="url", code="last_upstream")
        self.apply(await self.board.set_member(upstream.url, False))
        return upstream

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
        """Hold new requests on every replica, then pause every server in ``mode``. In
        ``abort`` mode the board's epoch moves first, so a replica that sees an aborted
        answer finds the move on the board (``refresh``) before its publication."""
        self.apply(await self.board.pause(mode))
        return await self.fan_out("/pause_generation", {"mode": mode}, self.pool.upstreams)

    async def resume(self) -> list[dict[str, Any]]:
        """Continue every server, then let held requests go on every replica."""
        try:
            return await self.fan_out("/continue_generation", {}, self.pool.upstreams)
        finally:
            self.apply(await self.board.resume())

    async def set_weight_version(self, version: str, *, abort_all: bool) -> list[dict[str, Any]]:
        body = {"new_version": version, "abort_all_requests": abort_all}
        if abort_all:
            self.apply(await self.board.abort())
        upstreams = self.pool.upstreams
        results = await self.fan_out("/update_weight_version", body, upstreams)
        if any(_took(version, upstreams, results)):
            await self._record_version(version)
        return results

    async def update_weights(self, model_path: str, version: str, mode: PauseMode,
                             load_format: str | None) -> WeightSync:
        """Pause in ``mode``, load ``model_path`` on every server (concurrently, each told
        ``version`` with its weights), record ``version``, continue. A step that fails on
        any server ends the sync there, still paused, so nothing runs on mixed weights
        until the admin retries or continues. ``Conflict`` when another sync holds the
        fleet's lock (nothing is sent)."""
        token = uuid.uuid4().hex
        what = f"version {version!r} from {model_path!r}"
        ttl_s = self.load_timeout_s + 4 * self.timeout_s + 60.0  # pause + load + continue
        holder = await self.board.begin_sync(token, what, ttl_s)
        if holder is not None:
            raise Conflict(f"a weight sync is in progress ({holder}); send this one again "
                           "once it has ended", code="sync_in_progress")
        try:
            return await self._update_weights(model_path, version, mode, load_format)
        finally:
            try:
                await self.board.end_sync(token)
            except StoreError as exc:  # the lock's expiry frees it
                log.warning("could not release the weight-sync lock: %s", exc.message)

    async def _update_weights(self, model_path: str, version: str, mode: PauseMode,
                              load_format: str | None) -> WeightSync:
        paused = await self.pause(mode)
        if not all(r["ok"] for r in paused):
            return WeightSync(False, "pause", paused)
        body: dict[str, Any] = {"model_path": model_path, "weight_version": version,
                                "abort_all_requests": False}
        if load_format is not None:
            body["load_format"] = load_format
        upstreams = self.pool.upstreams
        loads = await self.fan_out("/update_weights_from_disk", body, upstreams,
                                    timeout_s=self.load_timeout_s, answers=True)
        if not all(_took(version, upstreams, loads)):
            return WeightSync(False, "load", loads)
        await self._record_version(version)
        resumed = await self.resume()
        if not all(r["ok"] for r in resumed):
            return WeightSync(False, "continue", resumed)
        return WeightSync(True, "continue", loads)

    async def pass_through(self, path: str, body: dict[str, Any], *,
                           rank_stride: int | None = None) -> list[dict[str, Any]]:
        """``body`` to ``path`` on every server at once (an NCCL transfer needs every
        server in it together); with ``rank_stride`` (``init_weights_update_group``),
        server ``i`` gets ``rank_offset + i * rank_stride``, said in its result
        (``BadRequest`` when ``world_size`` cannot hold them). A ``weight_version`` that
        every server took is recorded."""
        upstreams = self.pool.upstreams
        bodies = [body] * len(upstreams)
        if rank_stride is not None:
            offset, world = int(body["rank_offset"]), int(body["world_size"])
            if offset + len(upstreams) * rank_stride > world:
                raise BadRequest(
                    f"world_size {world} is too small for {len(upstreams)} servers of "
                    f"{rank_stride} rank(s) from rank_offset {offset}", param="world_size")
            bodies = [{**body, "rank_offset": offset + i * rank_stride}
                      for i in range(len(upstreams))]
        results = await self.fan_out(path, bodies, upstreams, timeout_s=self.load_timeout_s,
                                      answers=True)
        if rank_stride is not None:
            for result, sent in zip(results, bodies, strict=True):
                result["rank_offset"] = sent["rank_offset"]
        version = body.get("weight_version")
        if isinstance(version, str) and all(r["ok"] for r in results):
            _took(version, upstreams, results)
            await self._record_version(version)
        return results

    async def _record_version(self, version: str) -> None:
        """The fleet's version is ``version`` (its servers were told already)."""
        self._version = version
        self.apply(await self.board.set_weight_version(version))

    async def fan_out(self, path: str, body: dict[str, Any] | list[dict[str, Any]],
                       upstreams: list[Upstream], *, timeout_s: float | None = None,
                       answers: bool = False) -> list[dict[str, Any]]:
        """``body`` (or ``body[i]`` to the ``i``-th) to ``path`` on each of ``upstreams``
        (draining ones too: they hold requests), one answer each, in order; with
        ``answers``, each carries the server's JSON answer (None if not JSON), and a 200
        saying ``success: false`` is a failure."""
        bodies = body if isinstance(body, list) else [body] * len(upstreams)

        async def one(upstream: Upstream, sent: dict[str, Any]) -> dict[str, Any]:
            result: dict[str, Any] = {"url": upstream.url, "ok": False, "status": None}
            answer = None
            try:
                response = await self.pool.client.request(
                    "POST", upstream.url, path, json=sent, timeout=timeout_s or self.timeout_s
                )
            except UpstreamError as exc:
                result["error"] = f"unreachable: {type(cause(exc)).__name__}"
            else:
                ok = response.status_code == 200
                result.update(ok=ok, status=response.status_code,
                              error=None if ok else response.text[:500])
                if answers:
                    try:
                        answer = response.json()
                    except ValueError:
                        pass
                    if ok and isinstance(answer, dict) and answer.get("success") is False:
                        result.update(ok=False, error=str(answer.get("message"))[:500])
            return {**result, "answer": answer} if answers else result

        return list(await asyncio.gather(
            *(one(u, b) for u, b in zip(upstreams, bodies, strict=True))))


def _took(version: str, upstreams: list[Upstream], results: list[dict[str, Any]]) -> list[bool]:
    """Put each upstream whose result is ok on ``version``; return the results' oks."""
    for upstream, result in zip(upstreams, results, strict=True):
        if result["ok"]:
            upstream.weight_version = version
    return [r["ok"] for r in results]
