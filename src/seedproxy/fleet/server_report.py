"""What the proxy knows of one server (``UpstreamReport``), read from its
``/get_server_info`` (``read_server_info``) the same way by the fleet's inspections, a
server joining, and ``seedproxy doctor``; and who may join the fleet (``join_refusal``).

Invariants: ``deterministic`` is None until ``/get_server_info`` was read and parsed
(``checked``), then True exactly when the preflight found nothing; a server that
cannot be reached is ``up=False`` with the reason in ``error``, never checked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import Conflict, UpstreamError, UpstreamUnavailable
from ..transport.client import UpstreamClient
from ..transport.failure import cause
from ..transport.loop import LOOPED, is_loop
from .preflight import Finding, check_server_info

__all__ = ["UpstreamReport", "join_refusal", "read_server_info"]


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


def join_refusal(report: UpstreamReport, *, server_info: bool, enforce: bool,
                 fleet_version: str | None) -> None:
    """Raise why the server ``report`` describes may not join; return when it may.

    A URL that leads back to this proxy is a 409 (``upstream_loop``) and one that cannot
    be reached a 503, whatever the preflight setting. With ``server_info`` (SGLang) its
    ``/get_server_info`` must be readable and pass the preflight, unless it only warns
    (not ``enforce``); and it must report the fleet's weight version, when the fleet has
    one (other weights give other tokens for the same seed). A 409 names every reason.
    """
    if report.looped:
        raise Conflict(f"{report.url} cannot join the fleet: {LOOPED}", param="url",
                       code="upstream_loop")
    if not report.up:
        raise UpstreamUnavailable(f"{report.url} cannot join the fleet: {report.error}")
    if not server_info:
        return
    reasons: list[str] = []
    if enforce:
        if not report.checked:
            reasons.append(f"its determinism could not be checked ({report.error})")
        reasons.extend(f"{f.problem}; fix: {f.fix}" for f in report.findings)
    if fleet_version is not None and report.weight_version != fleet_version:
        reported = "none" if report.weight_version is None else repr(report.weight_version)
        reasons.append(f"it reports weight version {reported}, the fleet is on "
                       f"{fleet_version!r}; fix: load that version's weights "
                       "(/update_weights_from_disk with its weight_version), then add it")
    if reasons:
        code = "preflight_failed" if enforce and (report.findings or not report.checked) \
            else "weight_version_mismatch"
        raise Conflict(f"{report.url} cannot join the fleet: " + "; ".join(reasons),
                       param="url", code=code)
