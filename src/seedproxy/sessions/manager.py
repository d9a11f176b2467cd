"""Session lifecycle on top of a store: naming, groups, keys and the open-session cap.

The cap is checked by the store in the same atomic step as each create, so sessions
created at once (tasks, processes, replicas) never exceed it; a group reserves room for
its members still to come, and one refused part-way deletes the members it made.

Resuming and forking a recorded session (``replay_options``; the source must exist
at creation, its record is read at the first request, ``pipeline/replaying.py``):

- ``resume``: the new session keeps the source's identity (its seeds at every index:
  a live continuation samples what a rerun would), index mode and ``seed``; never a group.
- ``fork`` at K: the first K interactions are answered from the source's record; from
  K on it samples with its *own* identity's seeds, which must differ from the source's.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import BadRequest, OverCapacity
from .cursor import Cursors
from .ids import MAX_ID_BYTES, MAX_IDENTITY_BYTES, check_id
from .record import SessionRecord
from .store.base import SessionStore, not_found

__all__ = ["NewSession", "ReplayOptions", "SessionGroup", "SessionManager", "member_identities",
           "replay_options"]

_MAX_SUFFIX = 100_000


@dataclass(frozen=True, slots=True)
class NewSession:
    """A session a request names that does not exist yet (its id already checked).
    It is created only once the request is known to be forwarded."""

    session_id: str


@dataclass(frozen=True, slots=True)
class SessionGroup:
    group_id: str
    sessions: list[SessionRecord]


class SessionManager:
    """Creates and finds sessions. Physical ids are ``identity``, then ``identity-1``,
    ``identity-2``, ...: a rerun of a rollout gets a fresh session with the same seeds."""

    def __init__(
        self, store: SessionStore, *, max_open_sessions: int | None = None,
        default_seed: int | None = None, default_index_by: str = "arrival",
        cursors: Cursors | None = None,
    ) -> None:
        """``default_seed``: the configured seed for requests without one (deterministic
        mode only); refused for groups of more than one, like a group's own ``seed``."""
        self.store = store
        self.cursors = cursors if cursors is not None else Cursors()
        """This process's views of recently used sessions (``cursor.py``)."""
        self._max_open, self._default_seed = max_open_sessions, default_seed
        self._default_index_by = default_index_by

    async def find(self, session_id: str, *, cached: bool = False) -> SessionRecord | None:
        """The session, or None when unknown. ``cached``: one this process holds a view
        of comes back as it was read, with no store operation (it may be gone from the
        store since: a seating with its ``created_seq`` tells)."""
        known = self.cursors.known(session_id) if cached else None
        if known is not None:
            return known
        record = await self.store.get(session_id)
        if cached and record is not None:
            self.cursors.keep(record)
        return record

    async def find_by_key(self, api_key: str, *, cached: bool = False) -> SessionRecord | None:
        """The session ``api_key`` opens, or None; ``cached`` as for ``find``."""
        known = self.cursors.by_key(api_key) if cached else None
        if known is not None:
            return known
        record = await self.store.find_by_key(api_key)
        if cached and record is not None and record.api_key == api_key:
            self.cursors.keep(record)
        return record

    async def require(self, session_id: str) -> SessionRecord:
        if (record := await self.store.get(session_id)) is None:
            raise not_found(session_id)
        return record

    async def get_or_create(self, session_id: str) -> SessionRecord:
        """Return the named session, creating it with identity = its id if new."""
        record = await self.store.get(session_id)
        if record is not None:
            return record
        fresh = SessionRecord(session_id, session_id, _new_key(), index_by=self._default_index_by)
        if not await self.store.create(fresh, max_open=self._max_open):  # created first elsewhere
            return await self.require(session_id)
        self.cursors.keep(fresh)
        return fresh

    async def create_group(
        self, *, identity: str | None = None, session_id: str | None = None,
        group_size: int = 1, metadata: dict[str, Any] | None = None, seed: int | None = None,
        index_by: str | None = None, replays: dict[str, Any] | None = None,
    ) -> SessionGroup:
        """Create ``group_size`` sessions; identities ``{identity}:{i}`` when > 1.
        ``replays`` (``replay_options``) makes each a replay of a recorded session."""
        if group_size < 1:
            raise BadRequest("group_size must be at least 1", param="group_size")
        if self._default_seed is not None and seed is None and group_size > 1:
            raise BadRequest(f"the configured default seed ({self._default_seed}) would be a "
                             "shared seed for the group, making every sample identical; unset it "
                             "to derive one per session", param="group_size")
        if seed is not None and group_size > 1:
            raise BadRequest("a shared seed for a group makes every sample identical; drop "
                             "`seed` and let seedproxy derive one per session", param="seed")
        if session_id is not None and group_size > 1:
            raise BadRequest("session_id names one session; use identity for groups",
                             param="session_id")
        if session_id is not None:
            check_id(session_id, param="session_id")
        if identity is not None:  # suffixed (``:{i}``, ``-{n}``) unless session_id names it
            room = MAX_ID_BYTES if session_id is not None else MAX_IDENTITY_BYTES
            check_id(identity, param="identity", max_bytes=room)
        base = identity or session_id or secrets.token_hex(6)
        identities = member_identities(base, group_size)
        extra = dict(metadata or {})
        mode = index_by or self._default_index_by
        if session_id is not None:
            record = SessionRecord(session_id, base, _new_key(), session_id, extra, seed=seed,
                                   index_by=mode, replays=replays)
            if not await self.store.create(record, max_open=self._max_open):
                raise BadRequest(f"session {session_id!r} already exists", param="session_id")
            self.cursors.keep(record)
            return SessionGroup(session_id, [record])
        # The first member's suffix names the group, so a rerun gets a new group id.
        first = SessionRecord(identities[0], identities[0], _new_key(), None, extra, seed=seed,
                              index_by=mode, replays=replays)
        suffix = await self._create_with_suffix(first, lambda n: _suffixed(base, n),
                                                reserve=group_size)
        created = [first]
        try:
            for ident in identities[1:]:
                record = SessionRecord(ident, ident, _new_key(), first.group_id, dict(extra),
                                       seed=seed, index_by=mode,
                                       replays=dict(replays) if replays else None)
                await self._create_with_suffix(record, lambda _n: first.group_id, start=suffix,
                                               reserve=group_size - len(created))
                created.append(record)
        except (OverCapacity, BadRequest):  # the group fits whole or not at all
            for made in created:
                await self.store.delete(made.session_id)
                self.cursors.forget(made.session_id)
            raise
        return SessionGroup(first.group_id or base, created)

    async def _create_with_suffix(
        self, record: SessionRecord, group_for: Callable[[int], str | None], *, start: int = 0,
        reserve: int = 1,
    ) -> int:
        """Create ``record`` under the first free ``identity[-n]`` (within the cap, with
        room for ``reserve`` sessions); return that n."""
        for n in range(start, start + _MAX_SUFFIX):
            record.session_id = _suffixed(record.identity, n)
            record.group_id = group_for(n)
            if await self.store.create(record, max_open=self._max_open, reserve=reserve):
                self.cursors.keep(record)
                return n
        raise BadRequest(f"too many sessions for identity {record.identity!r}", param="identity")


def member_identities(base: str, group_size: int) -> list[str]:
    """The identities of a group's members: ``base`` alone, or ``{base}:0`` ... ``:{k-1}``."""
    return [base] if group_size == 1 else [f"{base}:{i}" for i in range(group_size)]


def _new_key() -> str:
    return "sk-sp-" + secrets.token_urlsafe(24)


def _suffixed(name: str, n: int) -> str:
    return name if n == 0 else f"{name}-{n}"


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    """What ``SessionManager.create_group`` is given for a resumed or forked session."""

    identity: str | None
    index_by: str | None
    seed: int | None
    replays: dict[str, Any] | None


async def replay_options(
    store: SessionStore, *, resume: str | None, fork: tuple[str, int] | None,
    identity: str | None, group_size: int, index_by: str | None, seed: int | None,
    session_id: str | None = None,
) -> ReplayOptions:
    """The creation options; 400 on a conflict (``BadRequest`` names the field), 404 when
    the source session is unknown. No fork branch gets the source's identity (its
    ``identity``, or ``session_id`` when it names none, as ``member_identities`` spells
    a group's), since it would re-sample the source's seeds."""
    if resume is None and fork is None:
        return ReplayOptions(identity, index_by, seed, None)
    if resume is not None and fork is not None:
        raise BadRequest("give resume or fork, not both", param="fork")
    source_id, at, param = (resume, None, "resume")
    if fork is not None:
        (source_id, at), param = fork, "fork"
    assert source_id is not None
    check_id(source_id, param=param)
    if (source := await store.get(source_id)) is None:
        raise not_found(source_id, param)
    if index_by is not None and index_by != source.index_by:
        raise BadRequest(f"index_by must be the source's ({source.index_by!r})",
                         param="index_by")
    replays = {"session": source.session_id, "at": at}
    if resume is not None:
        if group_size != 1:
            raise BadRequest("resume makes one session; fork makes groups", param="group_size")
        if identity is not None and identity != source.identity:
            raise BadRequest(f"a resumed session keeps the source's identity "
                             f"({source.identity!r}); fork samples with a new one",
                             param="identity")
        if seed is not None and seed != source.seed:
            raise BadRequest("a resumed session keeps the source's seed", param="seed")
        return ReplayOptions(source.identity, source.index_by, source.seed, replays)
    base = identity if identity is not None else session_id
    if base is not None and source.identity in member_identities(base, group_size):
        raise BadRequest(f"a fork samples with a new identity's seeds, but a branch would get "
                         f"the source's own ({source.identity!r}): give another identity "
                         "(or resume to keep the source's)", param="identity")
    return ReplayOptions(identity, source.index_by, seed, replays)

