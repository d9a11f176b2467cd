"""The determinism preflight: ``seedproxy doctor`` (one line per upstream; exit 0 when
every server is deterministic, 1 when one is not, 3 when one could not be checked) and
the check ``serve`` runs before it binds."""

from __future__ import annotations

import asyncio

from ..errors import ConfigError
from ..fleet.server_report import UpstreamReport, read_server_info
from ..transport.client import upstream_client

__all__ = ["doctor", "inspect_upstreams", "refuse_nondeterministic"]

EXIT_NOT_DETERMINISTIC = 1
EXIT_UNCHECKED = 3


async def inspect_upstreams(urls: list[str], *, timeout_s: float = 5.0) -> list[UpstreamReport]:
    """Read every server's ``/get_server_info`` once, on a client of its own."""
    reports = [UpstreamReport(url, up=True, inflight=0) for url in urls]
    async with upstream_client(read_timeout_s=timeout_s, connect_timeout_s=timeout_s,
                               pool_timeout_s=timeout_s) as client:
        await asyncio.gather(*(read_server_info(client, r, timeout_s) for r in reports))
    return reports


def refuse_nondeterministic(urls: list[str]) -> None:
    """``ConfigError`` naming the first server that fails the preflight; one that could
    not be checked is not refused (the health loop checks it once it answers)."""
    reports = asyncio.run(inspect_upstreams(urls))
    for report in reports:
        if report.findings:
            raise ConfigError(
                f"{report.findings[0].line(report.url)} "
                "(or pass --allow-nondeterministic-upstream)"
            )


def doctor(urls: list[str]) -> int:
    reports = asyncio.run(inspect_upstreams(urls))
    code = 0
    for report in reports:
        version = report.weight_version or "-"
        if not report.checked:
            print(f"{report.url}: NOT CHECKED ({report.error})")
            code = max(code, EXIT_UNCHECKED)
        elif report.findings:
            for finding in report.findings:
                print(f"{report.url}: NOT DETERMINISTIC: {finding.problem}; fix: {finding.fix}")
            code = max(code, EXIT_NOT_DETERMINISTIC)
        else:
            print(f"{report.url}: deterministic (weight version {version})")
    return code
