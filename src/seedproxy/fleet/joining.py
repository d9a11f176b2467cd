"""Who may join the fleet at run time: the rule ``FleetControl.join`` applies to what a
new server reported, before any request goes to it. Pure: no I/O here.

- A URL that leads back to this proxy (its probe came back here, ``loop.py``) is
  refused (409, code ``upstream_loop``), whatever the preflight setting.
- A server that cannot be reached is refused (503): nothing was checked.
- A kind that ``reports_server_info`` (SGLang): its ``/get_server_info`` must be
  readable and pass the determinism preflight (``preflight.py``), unless the preflight
  only warns (``--no-deterministic``, ``--allow-nondeterministic-upstream``); and it
  must report the fleet's weight version, when the fleet has one: a server on other
  weights would give other tokens for the same seed. Each refusal is a 409 naming every reason.
"""

from __future__ import annotations

from typing import Protocol

from ..errors import Conflict, UpstreamUnavailable
from ..transport.loop import LOOPED
from .preflight import Finding

__all__ = ["Reported", "join_refusal"]


class Reported(Protocol):
    """What a joining server told (``server_report.UpstreamReport``)."""

    url: str
    up: bool
    checked: bool
    findings: list[Finding]
    weight_version: str | None
    error: str | None
    looped: bool


def join_refusal(report: Reported, *, server_info: bool, enforce: bool,
                 fleet_version: str | None) -> None:
    """Raise why the server ``report`` describes may not join; return when it may."""
    if report.looped:
        raise Conflict(f"{report.url} cannot join the fleet: {LOOPED}", param="url",
                       code="upstream_loop")
    if not report.up:
        raise UpstreamUnavailable(f"{report.url} cannot join the fleet: {report.error}")
    if not server_info:
        return
    reasons: list[str] = []
    if not report.checked and enforce:
        reasons.append(f"its determinism could not be checked ({report.error})")
    if enforce:
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
