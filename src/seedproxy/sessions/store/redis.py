"""The Redis store: sessions shared by several proxy replicas. ``redis://host:port/db``,
or a Sentinel-named primary, ``redis+sentinel://host:port[,host:port...]/service[/db]``
(``redis_url.py``).

Invariants: every read-modify-write is one Lua script (``redis_scripts.py``), atomic
across replicas. Per session, keys are::

    {p}s:{id}   hash: ``rec`` (the record's fixed fields, JSON) + one field per mutable one
    {p}i:{id}   hash: interaction_id -> its stored blob (``codec.py``)
    {p}q:{id}   zset: interaction_id by record sequence number (``rseq`` in {p}s:{id})
    {p}r:{id}   hash digest -> "index|interaction_id"; {p}rz:{id} zset digest by recency
    {p}p:{id}   hash: pinned index -> extra requests pinned to it
    {p}o:{id}   zset (lexical): "%020d|interaction_id" % request_index, the export order
    {p}w:{id}   hash: interaction_id -> its reward (kept apart from the interaction's
                JSON, which a script could not rewrite losslessly)
    {p}c:{id}   hash: content-keyed occurrences, ``k:{key}`` -> next number and
                ``i:{interaction_id}`` -> the number it took

plus ``{p}all`` and ``{p}g:{group}`` (zsets by ``created_seq``), ``{p}open`` (set),
``{p}k:{sha256(api_key)}`` -> session id, ``{p}epoch`` (the store's epoch, drawn by
the first create on an empty database; each session's hash keeps its own); the views
add theirs (``redis_core.py``). ``?ended_ttl_s=N``
lets Redis expire a session N seconds after it is both ended and exported (never
before export: dropping un-exported work is the evictor's job, which logs it).

Outages: what a caller is told and what Redis holds must agree. A command waits at
most ``?timeout_s=N`` (5 s) for its answer, and every script refuses to run (error
``SEEDPROXY_LATE``) once Redis's clock passes a deadline of ``0.75 * timeout_s`` after it
was sent, so a command that timed out (a 503) and sat in a paused Redis's buffer never
takes effect later (clocks within ``timeout_s / 4`` of each other assumed). A broken
connection (Redis restarted) is re-made and the command resent once, since a command
on a dead connection never ran; under Sentinel the new connection goes to whichever
primary the Sentinels name then. With ``?wait_replicas=N`` every script that writes is
acknowledged only once N replicas hold it (``redis_core.py``), so a primary's death
loses nothing a client was told, and no index handed out is handed out again.

Export leases (rules: ``leases.py``): ``{p}l:{id}`` (a session's latest lease,
``"{until}|{batch_id}"``, dropped with its other keys) and ``{p}b:{batch_id}`` (the batch
as JSON, expiring ``BATCH_KEEP_S`` past its lease or its ack). A lease is one script over
every session of the batch (all or none: two replicas never both get a session); an ack
is one too, marking the sessions exported and releasing their lease together.

Redis Cluster is not supported: the scripts that create, end, record and export a
session update store-wide keys in the same atomic step, and a lease or an ack covers
several sessions; Cluster runs a script on one hash slot's keys.
"""

from __future__ import annotations

import builtins
import secrets
import time
from typing import Any

import orjson

from ...errors import SessionNotFound
from ..codec import Link, Sent, encode, resolve
from ..interaction import Interaction
from ..record import Recorded, SessionRecord, Slot, Stale, order_key, summary_fields
from . import redis_scripts as lua
from .base import RETRY_MEMORY, not_found, over_capacity
from .leases import BATCH_KEEP_S, Batch
from .redis_core import RedisCore

__all__ = ["RedisStore"]

_MUTABLE = ("next_index", "last_active_at", "ended", "ended_seq", "end_status", "reward",
            "exported", "interaction_count", "last_order", "last_upstream", "last_weight_version",
            "store_epoch")
"""Kept in fields of their own in the session's hash, beside ``rec``."""


def _arg(value: object) -> str:
    return "" if value is None else str(value)


class RedisStore(RedisCore):
    """``SessionStore`` on Redis, shared by every replica pointed at the same database."""

    def __init__(self, url: str, *, retry_memory: int = RETRY_MEMORY) -> None:
        super().__init__(url)
        self._retry_memory = retry_memory
        (self._allocate, self._create, self._end, self._record, self._set_reward,
         self._occurrence, self._lease_script, self._ack_script) = (self.script(body) for body in (
            lua.ALLOCATE, lua.CREATE, lua.END, lua.RECORD, lua.SET_REWARD, lua.OCCURRENCE,
            lua.LEASE, lua.ACK))
        self._changes = self._guarded(self.client.register_script(lua.GUARD + lua.CHANGES),
                                      writes=False)

    async def create(
        self, record: SessionRecord, *, max_open: int | None = None, reserve: int = 1
    ) -> bool:
        now = time.time()
        fixed = {k: v for k, v in record.to_dict().items() if k not in _MUTABLE}
        fixed["created_at"] = now
        keys = [self._k("s", record.session_id), *(self._p + name for name in ("all", "open")),
                self._key_of(record.api_key), self._p + "seq:created",
                self._k("id", record.identity),
                *(self._p + name for name in ("unexp", "active", "ver", "epoch"))]
        if record.group_id is not None:
            keys.append(self._k("g", record.group_id))
        args: builtins.list[bytes | str] = [
            record.session_id, orjson.dumps(fixed), repr(now), "1" if record.group_id else "0",
            self.changes_channel, _arg(max_open), str(reserve), secrets.token_hex(8),
        ]
        reply = await self.run(self._create(keys=keys, args=args))
        if int(reply[0]) == -2 and max_open is not None:
            raise over_capacity(max_open)
        if int(reply[0]) < 0:
            return False
        record.created_seq = int(reply[0])
        record.store_epoch = reply[1].decode()
        record.created_at = record.last_active_at = now
        return True

    async def allocate(
        self, session_id: str, *, digest: bytes, retry: bool, pinned: int | None,
        content_key: str | None = None, created_seq: int | None = None, after: int | None = None,
    ) -> Slot | Stale:
        keys = [*(self._k(kind, session_id) for kind in ("s", "r", "rz", "p")),
                self._p + "active", *(self._k(kind, session_id) for kind in ("c", "i", "q"))]
        args: builtins.list[bytes | str | int] = [
            digest, "1" if retry else "0", _arg(pinned), self._retry_memory, repr(time.time()),
            session_id, content_key or "", _arg(created_seq), _arg(after)]
        reply = await self.run(self._allocate(keys=keys, args=args))
        if int(reply[0]) < 0:
            raise not_found(session_id)
        if int(reply[0]) == 2:
            return Stale(int(reply[1]), [blob for blob in reply[2] if blob is not None])
        index, _, interaction_id = reply[1].decode().partition("|")
        number = int(reply[2])
        return Slot(int(index), interaction_id, reused=int(reply[0]) == 1,
                    occurrence=None if number < 0 else number)

    async def occurrence(self, session_id: str, key: str, interaction_id: str) -> int:
        keys = [self._k("s", session_id), self._k("c", session_id)]
        number = int(await self.run(self._occurrence(keys=keys, args=[key, interaction_id])))
        if number < 0:
            raise not_found(session_id)
        return number

    async def record(self, session_id: str, interaction: Interaction, *,
                     link: Link | None = None, sent: Sent | None = None,
                     after: int | None = None) -> Recorded:
        keys = [*(self._k(kind, session_id) for kind in ("s", "i", "o", "w", "q")),
                self._p + "active", self._p + "ver"]
        data = encode(interaction, link, sent)
        args: builtins.list[bytes | str] = [
            interaction.interaction_id, data, repr(time.time()), order_key(interaction),
            orjson.dumps(summary_fields(interaction)), session_id, _arg(after)]
        reply = await self.run(self._record(keys=keys, args=args))
        if reply == 0:
            raise not_found(session_id)
        return Recorded(int(reply[0]), data, int(reply[1]) == 1)

    async def interactions(self, session_id: str) -> builtins.list[Interaction]:
        pipe = self.client.pipeline(transaction=True)
        pipe.exists(self._k("s", session_id))
        pipe.hvals(self._k("i", session_id))
        pipe.hgetall(self._k("w", session_id))
        exists, values, rewards = await self.run(pipe.execute())
        if not exists:
            raise not_found(session_id)
        items = resolve(values)
        for item in items:
            reward = rewards.get(item.interaction_id.encode())
            if reward is not None:
                item.reward = float(reward)
        return items

    async def changes(self, session_id: str, after: int) -> tuple[int, builtins.list[bytes]]:
        keys = [self._k(kind, session_id) for kind in ("s", "i", "q")]
        reply = await self.run(self._changes(keys=keys, args=[after]))
        if int(reply[0]) < 0:
            raise not_found(session_id)
        return int(reply[0]), [blob for blob in reply[1] if blob is not None]

    async def stored_bytes(self) -> int:
        """The bytes of every stored interaction record (what a rollout costs here)."""
        total = 0
        async for key in self.client.scan_iter(match=self._p + "i:*"):
            total += sum(map(len, await self.run(self.client.hvals(key))))
        return total

    async def set_reward(
        self, session_id: str, reward: float, interaction_id: str | None
    ) -> str | None:
        keys = [*(self._k(kind, session_id) for kind in ("s", "i", "o", "w")), self._p + "ver"]
        args = [repr(float(reward)), interaction_id or ""]
        reply = await self.run(self._set_reward(keys=keys, args=args))
        if int(reply[0]) == -1:
            raise not_found(session_id)
        if int(reply[0]) == -2:
            raise SessionNotFound(f"interaction {interaction_id!r} not found in {session_id!r}")
        return reply[1].decode() if int(reply[0]) == 1 else None

    async def end(
        self, session_id: str, *, abandoned_before: float | None = None
    ) -> SessionRecord:
        keys = [self._k("s", session_id),
                *(self._p + name for name in ("open", "seq:ended", "ready", "ver"))]
        exported = await self.run(self._end(
            keys=keys, args=[session_id, self.changes_channel, _arg(abandoned_before)]))
        record = None if exported == -1 else await self.get(session_id)
        if record is None:
            raise not_found(session_id)
        if exported == b"1" and record.ended:  # not a session left open (not abandoned)
            await self._expire(session_id)
        return record

    async def close(self) -> None:
        await self.client.aclose()
        if self._sentinels is not None:
            await self._sentinels.aclose()

    # -- export leases -----------------------------------------------------------------

    def _lease_keys(self, batch_id: str, ids: builtins.list[str]) -> builtins.list[str]:
        return [self._k("b", batch_id), *(self._k("s", s) for s in ids),
                *(self._k("l", s) for s in ids)]

    async def lease(
        self, batch_id: str, records: builtins.list[SessionRecord], *,
        now: float, until: float, remove: bool, named: bool,
    ) -> builtins.list[str]:
        ids = [r.session_id for r in records]
        batch = Batch([(r.session_id, r.created_seq) for r in records], remove, until)
        keep_ms = max(1, int((until - now + BATCH_KEEP_S) * 1000))
        args: builtins.list[Any] = [batch_id, repr(now), repr(until), "1" if named else "0",
                                    keep_ms, orjson.dumps(batch),
                                    *(str(r.created_seq) for r in records)]
        refused = await self.run(
            self._lease_script(keys=self._lease_keys(batch_id, ids), args=args))
        return [ids[int(i) - 1] for i in refused]

    async def held_until(self, session_ids: builtins.list[str], now: float) -> dict[str, float]:
        if not session_ids:
            return {}
        values = await self.run(self.client.mget([self._k("l", s) for s in session_ids]))
        return {s: u for s, v in zip(session_ids, values, strict=True)
                if v is not None and (u := float(v.split(b"|", 1)[0])) > now}

    async def ack(self, batch_id: str, now: float) -> bool:
        raw = await self.run(self.client.get(self._k("b", batch_id)))
        if raw is None:
            return False
        batch = Batch.from_json(orjson.loads(raw))
        if now >= batch.until + BATCH_KEEP_S:
            return False  # forgotten, as in every store (Redis's own TTL may lag)
        if not batch.acked:
            batch.acked, batch.until = True, min(batch.until, now)
        ids = [s for s, _ in batch.sessions]
        args: builtins.list[Any] = [batch_id, int(BATCH_KEEP_S * 1000),
                                    orjson.dumps(batch),
                                    *(str(seq) for _, seq in batch.sessions), *ids,
                                    self.changes_channel]
        keys = [*self._lease_keys(batch_id, ids),
                *(self._p + view for view in ("unexp", "ready", "ver"))]
        reply = await self.run(self._ack_script(keys=keys, args=args))
        if reply == -1:
            return False
        mine, ended = ([ids[int(i) - 1] for i in part] for part in reply)
        if batch.remove:
            for session_id in mine:
                await self.delete(session_id)
        else:
            for session_id in ended:
                await self._expire(session_id)
        return True
