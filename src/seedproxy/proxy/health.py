"""``/readyz``: 200 when some upstream answers and is neither degraded nor draining,
and the session store answers; else 503, with each one's reason."""

from __future__ import annotations

import logging

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from ..errors import StoreError
from ..fleet.pool import UpstreamPool
from ..sessions import SessionStore

__all__ = ["readiness_router", "warn_if_no_upstream"]

log = logging.getLogger("seedproxy")

_DEGRADED = "degraded: its recent requests all timed out"
_DRAINING = "draining: it left the fleet"


def readiness_router(pool: UpstreamPool, store: SessionStore) -> APIRouter:
    router = APIRouter()

    @router.get("/readyz")
    async def readyz() -> JSONResponse:
        probed = pool.upstreams  # the list probed, whatever joins or leaves meanwhile
        reasons = await pool.probe()
        upstreams = [
            {"url": u.url, "up": reasons[u.url] is None, "degraded": u.degraded,
             "reason": reasons[u.url] or (_DEGRADED if u.degraded else None)
             or (_DRAINING if u.draining else None)}
            for u in probed
        ]
        try:
            await store.count_open()
            stored: str | None = None
        except StoreError as exc:
            stored = exc.message
        ready = stored is None and any(u["reason"] is None for u in upstreams)
        body = {"ready": ready, "upstreams": upstreams,
                "store": {"up": stored is None, "reason": stored}}
        return JSONResponse(body, status_code=200 if ready else 503)

    return router


async def warn_if_no_upstream(pool: UpstreamPool) -> None:
    """At start-up: one WARNING when no upstream answers."""
    reasons = await pool.probe()
    if all(reason is not None for reason in reasons.values()):
        detail = "; ".join(f"{url}: {reason}" for url, reason in reasons.items())
        log.warning("no upstream answers /health yet (requests will get 503): %s", detail)
