"""``seedproxy export``: pull trajectories from a running proxy into JSON Lines.

Delivery is at least once: the export leases its batch, the file is written and
fsynced, and only then is the batch acknowledged (``POST /trajectories/ack``). A run
that dies before the ack loses nothing: the batch is exported again once its lease
(``--visibility-timeout``) runs out.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import httpx
import orjson
from tqdm import tqdm

from ..errors import ConfigError

__all__ = ["EXIT_SHORT", "HTTP_MARGIN_S", "export_to_file", "http_timeout_s"]

EXIT_SHORT = 1
"""``export --count N`` got fewer than N trajectories before its timeout."""

HTTP_MARGIN_S = 30.0
"""How much longer than the server's wait the export's HTTP call waits for its answer."""


def http_timeout_s(timeout_s: float) -> float:
    """The HTTP timeout of an export that asks the server to wait ``timeout_s``."""
    return timeout_s + HTTP_MARGIN_S


def export_to_file(
    url: str,
    *,
    out: str,
    group: str | None,
    count: int | None,
    timeout_s: float,
    admin_key: str | None,
    style: str = "individual",
    visibility_timeout_s: float | None = None,
) -> int:
    """Export ended sessions (``count`` of them, waiting up to ``timeout_s``) to ``out``,
    one trajectory per line, then acknowledge them. Fewer than ``count`` by the
    timeout: what came is still written (and acknowledged), a line on stderr says so,
    and the exit code is ``EXIT_SHORT``."""
    body: dict[str, object] = {"timeout_s": timeout_s, "style": style}
    if group:
        body["group_id"] = group
    if count is not None:
        if count < 1:
            raise ConfigError("--count must be at least 1")
        body["count"] = count
    if visibility_timeout_s is not None:
        if not 0 < visibility_timeout_s <= 86400:
            raise ConfigError("--visibility-timeout must be in (0, 86400] seconds")
        body["visibility_timeout_s"] = visibility_timeout_s
    headers = {"content-type": "application/json"}
    if admin_key:
        headers["authorization"] = f"Bearer {admin_key}"
    answer = _post(url, "/trajectories/export", body, headers, http_timeout_s(timeout_s))
    trajectories, batch_id = answer["trajectories"], answer["batch_id"]
    try:
        with open(out, "wb") as handle:
            for record in tqdm(trajectories, desc="export", unit="trajectory"):
                handle.write(orjson.dumps(record, option=orjson.OPT_SORT_KEYS) + b"\n")
            handle.flush()
            os.fsync(handle.fileno())
        _fsync_dir(out)
    except OSError as exc:
        raise ConfigError(f"cannot write {out}: {exc.strerror}") from None
    _post(url, "/trajectories/ack", {"batch_id": batch_id}, headers, http_timeout_s(0))
    still_open = answer.get("open_sessions")
    if not trajectories:
        waiting = (f"; {still_open} session{'s' if still_open != 1 else ''} still open"
                   if isinstance(still_open, int) and still_open else "")
        print(f"seedproxy: export: no ended session to export{waiting} (only ended "
              f"sessions are exported: POST /sessions/{{id}}/end); wrote 0 to {out}",
              file=sys.stderr)
    if count is not None and len(trajectories) < count:
        print(
            f"seedproxy: export: only {len(trajectories)} of {count} sessions had ended "
            f"within {timeout_s:g} s; wrote {len(trajectories)} to {out}",
            file=sys.stderr,
        )
        return EXIT_SHORT
    return 0


def _post(url: str, path: str, body: dict[str, object], headers: dict[str, str],
          timeout_s: float) -> dict[str, Any]:
    try:
        response = httpx.post(url.rstrip("/") + path, content=orjson.dumps(body),
                              headers=headers, timeout=timeout_s)
    except httpx.HTTPError as exc:
        what = "acknowledge the batch (it will be exported again)" if "ack" in path else "reach"
        raise ConfigError(f"cannot {what} {url}: {type(exc).__name__}") from None
    if response.status_code != 200:
        raise ConfigError(f"{url}{path} answered {response.status_code}: {response.text[:200]}")
    data: dict[str, Any] = response.json()
    return data


def _fsync_dir(path: str) -> None:
    """Make the file's directory entry durable too (a new file)."""
    try:
        fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on a directory
    finally:
        os.close(fd)
