"""Answering a resumed (or forked) session's requests from its source's record.

A seated request of a session with ``replays`` is answered from the record when:
- it is not pinned (``X-Request-Index``), and for a fork its index is below ``at``;
- the source recorded a completed answer (status 200, not abandoned) under the same
  interaction id on the same endpoint;
- the bodies match (``replay_key``);
- a stream can be answered in the client's protocol (not Responses);
- in arrival mode, index ``i - 1`` was answered from the record before.

Otherwise it goes live; in arrival mode so does every later request: a resumed
session never jumps back into the record. The chain lives in the store's atomic
``occurrence`` numbering (shared by replicas): the request answered from the record
at ``i`` numbers ``replay:{i}:mark`` under key ``replay:{i}``; request ``i + 1``
numbers ``replay:{i}:probe`` under the same key and gets 1 only if that mark came
first. Two store operations per request; the source's record is read once per process.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from ..errors import SessionNotFound
from ..seeds import content_key
from ..sessions import Interaction, SessionRecord, SessionStore
from .request import ClientRequest

__all__ = ["REPLAY_IGNORED", "ReplayBook", "replay_key"]

REPLAY_IGNORED = ("user", "metadata", "rid")
"""Body keys that do not have to match: tags for the client's own bookkeeping (Claude
Code's ``metadata.user_id`` names its process, which a rerun changes)."""


def replay_key(endpoint: str, body: dict[str, Any]) -> str:
    """The key two requests must share to be answered alike: ``seed``, ``stream`` and
    ``stream_options`` count; ``REPLAY_IGNORED`` does not."""
    return content_key(endpoint, body, REPLAY_IGNORED)


class ReplayBook:
    """Source records by session, read on first use and kept for this process: at most
    ``capacity`` sources (a long rollout's record can be megabytes), the least recently
    used dropped first and read again when next needed."""

    def __init__(self, store: SessionStore, *, capacity: int = 16) -> None:
        self._store = store
        self._capacity = capacity
        self._sources: OrderedDict[str, dict[str, Interaction]] = OrderedDict()

    async def lookup(self, session: SessionRecord, index: int, interaction_id: str,
                     client: ClientRequest, *, pinned: bool, streamable: bool
                     ) -> Interaction | None:
        """The recorded interaction that answers ``client``'s request, seated at
        ``index`` as ``interaction_id``, or None (it goes live)."""
        if session.replays is None or pinned:
            return None
        at = session.replays.get("at")
        if at is not None and index >= at:
            return None
        if client.stream and not streamable:
            return None
        recorded = (await self._source(str(session.replays["session"]))).get(interaction_id)
        endpoint = client.endpoint.value
        if (recorded is None or recorded.endpoint != endpoint or recorded.status != 200
                or recorded.abandoned or not isinstance(recorded.request, dict)
                or replay_key(endpoint, recorded.request) != replay_key(endpoint, client.body)):
            return None
        if session.index_by != "content":
            store, sid = self._store, session.session_id
            if index > 0 and await store.occurrence(
                    sid, f"replay:{index - 1}", f"replay:{index - 1}:probe") != 1:
                return None
            await store.occurrence(sid, f"replay:{index}", f"replay:{index}:mark")
        return recorded

    async def _source(self, session_id: str) -> dict[str, Interaction]:
        known = self._sources.get(session_id)
        if known is not None:
            self._sources.move_to_end(session_id)
            return known
        try:
            interactions = await self._store.interactions(session_id)
        except SessionNotFound:  # deleted since: nothing left to replay
            interactions = []
        by_id = {i.interaction_id: i for i in interactions}
        self._sources[session_id] = by_id
        if len(self._sources) > self._capacity:
            self._sources.popitem(last=False)
        return by_id
