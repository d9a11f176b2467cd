"""What the proxy knows of one server (``UpstreamReport``), and reading it from the
server's ``/get_server_info`` (``read_server_info``): the fleet's inspections, a server
joining, and ``seedproxy doctor`` all fill one the same way.

Invariants: ``deterministic`` is None until ``/get_server_info`` was read and parsed
(``checked``), then True exactly when the preflight found nothing; a server that
cannot be reached is ``up=False`` with the reason in ``error``, never checked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import UpstreamError
from ..transport.client import UpstreamClient
from ..transport.failure import cause
from ..transport.loop import LOOPED, is_loop
from .preflight import Finding, check_server_info

__all__ = ["UpstreamReport", "read_server_info"]


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
    draining: bool = False
    """It left the fleet and still holds requests (``Upstream.draining``)."""
    looped: bool = False
    """Its answer was this proxy's own loop refusal: the URL leads back here."""

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
            "state": "draining" if self.draining else "active",
            "error": self.error,
        }


async def read_server_info(
    client: UpstreamClient, report: UpstreamReport, timeout_s: float
) -> None:
    """Fill ``report`` from the server's ``/get_server_info``: its findings and weight
    version, or why it could not be checked."""
    try:
        response = await client.request("GET", report.url, "/get_server_info",
                                         timeout=timeout_s)
    except UpstreamError as exc:
        report.up = False
        report.error = f"unreachable: {type(cause(exc)).__name__}"
        return
    if is_loop(response):
        report.looped, report.error = True, LOOPED
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
