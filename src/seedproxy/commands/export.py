"""``seedproxy export``: pull trajectories from a running proxy into JSON Lines."""

from __future__ import annotations

import sys

import httpx
import orjson
from tqdm import tqdm

from ..errors import ConfigError

__all__ = ["EXIT_SHORT", "export_to_file"]

EXIT_SHORT = 1
"""``export --count N`` got fewer than N trajectories before its timeout."""


def export_to_file(
    url: str,
    *,
    out: str,
    group: str | None,
    count: int | None,
    timeout_s: float,
    admin_key: str | None,
    style: str = "individual",
) -> int:
    """Export ended sessions (``count`` of them, waiting up to ``timeout_s``) to ``out``,
    one trajectory per line. Fewer than ``count`` by the timeout: what came is still
    written (it is taken out of later exports), a line on stderr says so, and the exit
    code is ``EXIT_SHORT``."""
    body: dict[str, object] = {"timeout_s": timeout_s, "style": style}
    if group:
        body["group_id"] = group
    if count is not None:
        if count < 1:
            raise ConfigError("--count must be at least 1")
        body["count"] = count
    headers = {"authorization": f"Bearer {admin_key}"} if admin_key else {}
    try:
        response = httpx.post(
            url.rstrip("/") + "/trajectories/export",
            content=orjson.dumps(body),
            headers={"content-type": "application/json", **headers},
            timeout=timeout_s + 30,
        )
    except httpx.HTTPError as exc:
        raise ConfigError(f"cannot reach {url}: {type(exc).__name__}") from None
    if response.status_code != 200:
        raise ConfigError(f"{url} answered {response.status_code}: {response.text[:200]}")
    trajectories = response.json()["trajectories"]
    try:
        with open(out, "wb") as handle:
            for record in tqdm(trajectories, desc="export", unit="trajectory"):
                handle.write(orjson.dumps(record, option=orjson.OPT_SORT_KEYS) + b"\n")
    except OSError as exc:
        raise ConfigError(f"cannot write {out}: {exc.strerror}") from None
    if count is not None and len(trajectories) < count:
        print(
            f"seedproxy: export: only {len(trajectories)} of {count} sessions had ended "
            f"within {timeout_s:g} s; wrote {len(trajectories)} to {out}",
            file=sys.stderr,
        )
        return EXIT_SHORT
    return 0
