"""Readiness, apart from liveness: ``/healthz`` says the proxy runs, ``/readyz`` says
whether some upstream answers (200) or none does (503, with each one's reason)."""

from __future__ import annotations

import logging

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from ..backends.pool import UpstreamPool

__all__ = ["readiness_router", "warn_if_no_upstream"]

log = logging.getLogger("seedproxy")


def readiness_router(pool: UpstreamPool) -> APIRouter:
    router = APIRouter()

    @router.get("/readyz")
    async def readyz() -> JSONResponse:
        """Probe every upstream's ``/health`` now; open even with an admin key."""
        reasons = await pool.probe()
        ready = any(reason is None for reason in reasons.values())
        upstreams = [
            {"url": url, "up": reason is None, "reason": reason} for url, reason in reasons.items()
        ]
        return JSONResponse(
            {"ready": ready, "upstreams": upstreams}, status_code=200 if ready else 503
        )

    return router


async def warn_if_no_upstream(pool: UpstreamPool) -> None:
    """At start-up: one WARNING when no upstream answers, so a wrong URL shows at once."""
    reasons = await pool.probe()
    if all(reason is not None for reason in reasons.values()):
        detail = "; ".join(f"{url}: {reason}" for url, reason in reasons.items())
        log.warning("no upstream answers /health yet (requests will get 503): %s", detail)
