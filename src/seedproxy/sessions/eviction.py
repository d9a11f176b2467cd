"""Session time-to-live: forget sessions idle (or ended) longer than the TTL.

Invariant: a session whose trajectory no export has taken (ended or not) is never
dropped without a WARNING line naming it and what is lost; exported ones go quietly
(INFO). Age is measured from the session's last activity (a request or a recorded
interaction), read from the store, so every replica of a shared store agrees.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from ..errors import SessionNotFound
from .record import SessionRecord
from .store.base import SessionStore

__all__ = ["Evictor"]

_BATCH = 500
"""Sessions read from the activity index per step of a sweep."""

log = logging.getLogger("seedproxy.eviction")


class Evictor:
    """Sweeps ``store`` for sessions older than ``ttl_s``; ``clock`` is wall time."""

    def __init__(
        self, store: SessionStore, ttl_s: float, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self.ttl_s = ttl_s
        self._clock = clock

    @property
    def interval_s(self) -> float:
        """How often ``run`` sweeps: a quarter of the TTL, between 50 ms and 30 s."""
        return max(0.05, min(self.ttl_s / 4, 30.0))

    async def sweep(self) -> list[str]:
        """Evict once; return the evicted session ids in creation order. Reads the
        store's activity index a batch at a time: the cost is what is evicted."""
        cutoff = self._clock() - self.ttl_s
        evicted: list[tuple[int, str]] = []
        while True:
            batch = await self.store.idle(cutoff, _BATCH)
            for record in sorted(batch, key=lambda r: r.created_seq):
                if await self._evict(record):
                    evicted.append((record.created_seq, record.session_id))
            if len(batch) < _BATCH:
                return [session_id for _, session_id in sorted(evicted)]

    async def _evict(self, record: SessionRecord) -> bool:
        idle_s = self._clock() - record.last_active_at
        if not record.exported:
            try:
                count = len(await self.store.interactions(record.session_id))
            except SessionNotFound:  # deleted meanwhile (another replica, a client)
                return False
            state = "ended" if record.ended else "idle and never ended"
            log.warning(
                "evicting session %s (%s, not exported, inactive %.0fs > ttl %.0fs): "
                "%d recorded interaction(s) dropped",
                record.session_id, state, idle_s, self.ttl_s, count,
            )
        else:
            log.info("evicting exported session %s (inactive %.0fs)", record.session_id, idle_s)
        return await self.store.delete(record.session_id)

    async def run(self) -> None:
        """Sweep every ``interval_s`` until cancelled; a failed sweep is logged and retried."""
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.sweep()
            except Exception:  # the store may be briefly down; keep the loop alive
                log.exception("session eviction sweep failed")
