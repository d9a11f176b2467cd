"""An async client for RL loops over seedproxy's admin routes (HTTP only, so it works
against any seedproxy, local or remote).

A ``Group`` is k samples of one rollout identity; each ``Sample`` hands out OpenAI
clients already bound to its session, so whatever an agent sends through them is
seeded and recorded for that sample.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
from openai import AsyncOpenAI, OpenAI

from ._files import write_jsonl
from ._types import Style, Trajectory

__all__ = ["EXPORT_MARGIN_S", "ExportBatch", "Group", "Sample", "SeedProxyAPIError",
           "SeedProxyClient"]

T = TypeVar("T")

EXPORT_MARGIN_S = 30.0
"""An export's HTTP call waits this much longer than the server's own wait (``timeout_s``)."""

Target = str | os.PathLike[str]


class ExportBatch(list[Trajectory]):
    """The trajectories of one export, in delivery order, with the ``batch_id`` that
    acknowledges them (``SeedProxyClient.ack``)."""

    def __init__(self, batch_id: str, trajectories: list[Trajectory]) -> None:
        super().__init__(trajectories)
        self.batch_id = batch_id


class SeedProxyAPIError(Exception):
    """The proxy answered an admin call with an error (OpenAI's error shape)."""

    def __init__(self, status_code: int, message: str, type_: str | None = None) -> None:
        super().__init__(f"{status_code}: {message}")
        self.status_code = status_code
        self.message = message
        self.type = type_


@dataclass(frozen=True, slots=True)
class Sample:
    """One physical session of a group; ``base_url`` ends in ``/v1``."""

    session_id: str
    identity: str
    api_key: str
    base_url: str

    def openai(self, **options: Any) -> OpenAI:
        """A sync OpenAI client bound to this session (``options`` go to ``OpenAI``)."""
        return OpenAI(base_url=self.base_url, api_key=self.api_key, **options)

    def async_openai(self, **options: Any) -> AsyncOpenAI:
        """An async OpenAI client bound to this session."""
        return AsyncOpenAI(base_url=self.base_url, api_key=self.api_key, **options)


@dataclass(slots=True)
class Group:
    """The samples made by one ``create_group`` call, in identity order ``:0 .. :k-1``."""

    group_id: str
    samples: list[Sample]
    proxy: SeedProxyClient = field(repr=False)

    async def run(
        self,
        agent: Callable[[Sample], Awaitable[T]],
        *,
        concurrency: int = 8,
        reward: Callable[[T], float] | None = None,
        end: bool = False,
    ) -> list[T]:
        """Run ``agent`` on every sample, at most ``concurrency`` at once; results
        come back in sample order whatever order they finish in. With ``reward``,
        each sample's reward is set as soon as its agent returns; with ``end`` its
        session is then ended. An agent's exception propagates once all are done."""
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        gate = asyncio.Semaphore(concurrency)

        async def one(sample: Sample) -> T:
            async with gate:
                result = await agent(sample)
            if reward is not None:
                await self.proxy.set_reward(sample.session_id, reward(result))
            if end:
                await self.proxy.end(sample.session_id)
            return result

        outcomes = await asyncio.gather(*(one(s) for s in self.samples), return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        return list(outcomes)  # type: ignore[arg-type]  # no exceptions left

    async def set_rewards(self, rewards: Sequence[float]) -> None:
        """One reward per sample, in sample order (each on its last interaction)."""
        if len(rewards) != len(self.samples):
            raise ValueError(f"{len(rewards)} rewards for {len(self.samples)} samples")
        for sample, value in zip(self.samples, rewards, strict=True):
            await self.proxy.set_reward(sample.session_id, value)

    async def end(self) -> None:
        for sample in self.samples:
            await self.proxy.end(sample.session_id)

    async def export(
        self,
        *,
        style: Style = "individual",
        timeout_s: float = 60.0,
        out: Target | None = None,
        ack: bool = True,
        visibility_timeout_s: float | None = None,
        skip_abandoned: bool = False,
    ) -> ExportBatch:
        """Wait (up to ``timeout_s``) for every sample to end, then export them in
        sample order. With ``out`` they are written to that JSON Lines file (fsynced)
        and acknowledged only then; see ``SeedProxyClient.export`` for ``ack``."""
        return await self.proxy.export(
            group_id=self.group_id, count=len(self.samples), timeout_s=timeout_s,
            style=style, out=out, ack=ack, visibility_timeout_s=visibility_timeout_s,
            skip_abandoned=skip_abandoned,
        )


class SeedProxyClient:
    """``async with SeedProxyClient("http://127.0.0.1:8000", admin_key=...) as proxy:``.

    ``http`` (an ``httpx.AsyncClient`` with the proxy as ``base_url``) may be passed
    in; it is then not closed here.
    """

    def __init__(
        self,
        url: str,
        *,
        admin_key: str | None = None,
        timeout_s: float = 120.0,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self.timeout_s = timeout_s
        self._own_http = http is None
        self.http = http or httpx.AsyncClient(
            base_url=url.rstrip("/"),
            headers={"authorization": f"Bearer {admin_key}"} if admin_key else {},
            timeout=timeout_s,
            # Admin calls come in bursts with long rollouts between them; a connection
            # idle longer than the server's keep-alive (uvicorn: 5 s) may be closed
            # under a reused request, so idle ones are dropped well before that.
            limits=httpx.Limits(keepalive_expiry=1.0),
        )

    async def __aenter__(self) -> SeedProxyClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._own_http:
            await self.http.aclose()

    async def _call(
        self, method: str, path: str, body: dict[str, Any] | None = None,
        *, timeout_s: float | None = None,
    ) -> Any:
        response = await self.http.request(
            method, path, json=body,
            timeout=httpx.USE_CLIENT_DEFAULT if timeout_s is None else timeout_s)
        if response.is_success:
            return response.json() if response.content else None
        message, kind = response.text, None
        try:
            error = response.json()["error"]
            message, kind = str(error["message"]), error.get("type")
        except (ValueError, KeyError, TypeError):
            pass  # not OpenAI's error shape: keep the raw text
        raise SeedProxyAPIError(response.status_code, message, kind)

    async def create_group(
        self, identity: str, k: int = 1, *, metadata: dict[str, Any] | None = None
    ) -> Group:
        """k sessions replaying ``identity`` (identities ``{identity}:0..k-1`` when
        k > 1). Creating the same identity again makes new sessions with the same seeds."""
        return await self._group({"identity": identity, "group_size": k}, metadata)

    async def resume(self, session_id: str, *, metadata: dict[str, Any] | None = None) -> Group:
        """One new session replaying ``session_id``'s record with its identity (so its
        seeds): a rerun agent's requests that match the record are answered from it at
        once, with no upstream call; from the first that differs it goes live."""
        return await self._group({"resume": session_id}, metadata)

    async def fork(self, session_id: str, at: int, identity: str, k: int = 1, *,
                   metadata: dict[str, Any] | None = None) -> Group:
        """k sessions (identities ``{identity}:0..k-1`` when k > 1) that replay the first
        ``at`` interactions of ``session_id`` and sample with their own seeds from then."""
        fork = {"session": session_id, "at": at}
        return await self._group({"identity": identity, "group_size": k, "fork": fork}, metadata)

    async def _group(self, body: dict[str, Any], metadata: dict[str, Any] | None) -> Group:
        made = await self._call("POST", "/sessions", _given(body, metadata=metadata))
        samples = [
            Sample(s["session_id"], s["identity"], s["api_key"], s["base_url"])
            for s in made["sessions"]
        ]
        return Group(made["group_id"], samples, self)

    async def set_reward(
        self, session_id: str, reward: float, interaction_id: str | None = None
    ) -> None:
        body = _given({"reward": reward}, interaction_id=interaction_id)
        await self._call("POST", f"/sessions/{_quote(session_id)}/reward", body)

    async def end(self, session_id: str) -> None:
        await self._call("POST", f"/sessions/{_quote(session_id)}/end")

    async def trajectory(self, session_id: str, *, style: Style = "individual") -> Trajectory:
        """One session's trajectory now, without marking it exported."""
        data = await self._call("GET", f"/sessions/{_quote(session_id)}/trajectory?style={style}")
        return Trajectory.from_json(data)

    def export_timeout_s(self, timeout_s: float) -> float:
        """The HTTP timeout of an export that asks the server to wait ``timeout_s``:
        never shorter than that wait plus ``EXPORT_MARGIN_S``."""
        return max(self.timeout_s, timeout_s + EXPORT_MARGIN_S)

    async def export(
        self,
        *,
        group_id: str | None = None,
        session_ids: list[str] | None = None,
        count: int | None = None,
        timeout_s: float = 0.0,
        style: Style = "individual",
        remove: bool = False,
        out: Target | None = None,
        ack: bool = True,
        visibility_timeout_s: float | None = None,
        skip_abandoned: bool = False,
    ) -> ExportBatch:
        """``POST /trajectories/export`` (the README has selection and order), delivered
        at least once: with ``out`` the batch is written to that JSON Lines file and
        fsynced, then acknowledged; without it, ``ack=True`` acknowledges it once
        received and ``ack=False`` leaves that to ``ack(batch.batch_id)`` (unacknowledged,
        it is exported again after ``visibility_timeout_s``, 300 s by default).
        ``skip_abandoned`` leaves out sessions the proxy ended as abandoned (they leave
        later exports all the same)."""
        body = _given({"timeout_s": timeout_s, "style": style, "remove": remove},
                      skip_abandoned=skip_abandoned or None, group_id=group_id,
                      session_ids=session_ids, count=count,
                      visibility_timeout_s=visibility_timeout_s)
        data = await self._call("POST", "/trajectories/export", body,
                                timeout_s=self.export_timeout_s(timeout_s))
        batch = ExportBatch(data["batch_id"],
                            [Trajectory.from_json(t) for t in data["trajectories"]])
        if out is not None:
            await asyncio.to_thread(_write_durably, batch, out)
        if ack or out is not None:
            await self.ack(batch.batch_id)
        return batch

    async def ack(self, batch_id: str) -> None:
        """``POST /trajectories/ack``: the batch is delivered (idempotent)."""
        await self._call("POST", "/trajectories/ack", {"batch_id": batch_id})


def _write_durably(trajectories: list[Trajectory], out: Target) -> None:
    with open(out, "wb") as handle:
        write_jsonl(trajectories, handle)
        handle.flush()
        os.fsync(handle.fileno())
    with contextlib.suppress(OSError):  # the new file's directory entry
        fd = os.open(os.path.dirname(os.path.abspath(out)), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _given(body: dict[str, Any], **optional: Any) -> dict[str, Any]:
    """``body`` and each of ``optional`` that is not None."""
    return body | {name: value for name, value in optional.items() if value is not None}


def _quote(session_id: str) -> str:
    return quote(session_id, safe="")
