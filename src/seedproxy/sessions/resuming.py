"""Resuming and forking a recorded session: what the new session inherits.

- ``resume``: the new session keeps the source's identity (so its seeds are the
  source's at every index: a live continuation samples what a fresh rerun would), its
  index mode and its own ``seed``; one session, never a group.
- ``fork`` at K: the first K interactions are answered from the source's record; from
  K on the session samples with its *own* identity's seeds, which must differ from the
  source's. A group of k forks is k branches of one prefix.

The source must exist when the session is created; its record is read at the first
request (``pipeline/replaying.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import BadRequest, SessionNotFound
from .ids import check_id
from .manager import member_identities
from .record import SessionRecord
from .store.base import SessionStore

__all__ = ["ReplayOptions", "replay_options"]


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
    source = await _source(store, source_id, param)
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


async def _source(store: SessionStore, session_id: str, param: str) -> SessionRecord:
    record = await store.get(session_id)
    if record is None:
        raise SessionNotFound(f"session {session_id!r} not found", param=param)
    return record
