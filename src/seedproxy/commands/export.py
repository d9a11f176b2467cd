"""``seedproxy export``: pull trajectories from a running proxy into JSON Lines.

Delivery is at least once: the output is opened first (a path that cannot be written
leases nothing), then the batch is leased, the file written and fsynced (a device such
as ``/dev/null`` only written), and only then the batch acknowledged. A run that dies
before the ack loses nothing: the batch is exported again once its lease
(``--visibility-timeout``) runs out.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from collections.abc import Iterator
from typing import Any, BinaryIO, cast

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


def export_to_file(url: str, *, out: str, group: str | None, count: int | None,
                   timeout_s: float, admin_key: str | None, style: str = "individual",
                   visibility_timeout_s: float | None = None, skip_abandoned: bool = False,
                   ) -> int:
    """Export ended sessions (``count`` of them, waiting up to ``timeout_s``) to ``out``,
    one trajectory per line, then acknowledge them. Fewer than ``count`` by the
    timeout: what came is still written and acknowledged, and the exit code is
    ``EXIT_SHORT``. One line on stderr sums the export up."""
    if count is not None and count < 1:
        raise ConfigError("--count must be at least 1")
    if visibility_timeout_s is not None and not 0 < visibility_timeout_s <= 86400:
        raise ConfigError("--visibility-timeout must be in (0, 86400] seconds")
    optional = {"group_id": group or None, "count": count, "skip_abandoned": skip_abandoned or None,
                "visibility_timeout_s": visibility_timeout_s}
    body = {"timeout_s": timeout_s, "style": style,
            **{k: v for k, v in optional.items() if v is not None}}
    headers = {"content-type": "application/json",
               **({"authorization": f"Bearer {admin_key}"} if admin_key else {})}
    with _opened(out) as (handle, regular):
        answer = _post(url, "/trajectories/export", body, headers, http_timeout_s(timeout_s))
        trajectories, batch_id = answer["trajectories"], answer["batch_id"]
        _write(handle, regular, trajectories, out)
    _post(url, "/trajectories/ack", {"batch_id": batch_id}, headers, http_timeout_s(0))
    short = count is not None and len(trajectories) < count
    print(f"seedproxy: export: {_summary(answer, count, timeout_s, out)}", file=sys.stderr)
    return EXIT_SHORT if short else 0


@contextlib.contextmanager
def _opened(out: str) -> Iterator[tuple[BinaryIO, bool]]:
    """``out`` open for writing (not yet truncated) and whether it is a regular file. A
    file this created is removed again when the export fails before writing it."""
    existed = os.path.lexists(out)
    try:
        fd = os.open(out, os.O_WRONLY | os.O_CREAT, 0o666)
    except OSError as exc:
        raise ConfigError(f"cannot write {out}: {exc.strerror}") from None
    with os.fdopen(fd, "wb") as handle:
        try:
            yield handle, stat.S_ISREG(os.fstat(fd).st_mode)
        except BaseException:
            if not existed:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(out)
            raise


def _write(handle: BinaryIO, regular: bool, trajectories: list[Any], out: str) -> None:
    """Replace a regular file's content and make it durable (fsync, then its directory
    entry); a device or pipe is only written."""
    bar = tqdm(trajectories, desc="export", unit=" trajectories", total=len(trajectories),
               disable=None if trajectories else True)  # None: off unless on a terminal
    try:
        if regular:
            handle.truncate(0)
        for record in bar:
            handle.write(orjson.dumps(record, option=orjson.OPT_SORT_KEYS) + b"\n")
        handle.flush()
        if regular:
            os.fsync(handle.fileno())
            _fsync_dir(out)
    except OSError as exc:
        raise ConfigError(f"cannot write {out}: {exc.strerror}") from None
    finally:
        bar.close()


def _summary(answer: dict[str, Any], count: int | None, timeout_s: float, out: str) -> str:
    written = len(answer["trajectories"])
    behind = _behind(answer.get("waiting_on") or [])
    skipped = answer.get("skipped") or []
    if skipped:
        behind += f"; skipped {len(skipped)} abandoned session{_s(len(skipped))}"
    if count is not None and written < count:
        return (f"only {written} of {count} sessions had ended within {timeout_s:g} s"
                f"{behind}; wrote {written} to {out}")
    if not written:
        still_open = answer.get("open_sessions")
        waiting = (f"; {still_open} session{_s(still_open)} still open"
                   if isinstance(still_open, int) and still_open else "")
        return (f"no ended session to export{waiting}{behind} (only ended sessions are "
                f"exported: POST /sessions/{{id}}/end); wrote 0 to {out}")
    return f"wrote {written} trajector{'y' if written == 1 else 'ies'} to {out}{behind}"


def _behind(waiting: list[dict[str, Any]]) -> str:
    """Names the open sessions (at most three) an export stopped at."""
    if not waiting:
        return ""
    named = []
    for entry in waiting[:3]:
        left = entry.get("abandoned_in_s")
        until = "" if left is None else f", ended as abandoned in {left:.0f} s"
        named.append(f"{entry['session_id']} (idle {entry['idle_s']:.0f} s{until})")
    more = f" and {len(waiting) - 3} more" if len(waiting) > 3 else ""
    return (f"; in creation order it waits behind open session{_s(len(waiting))} "
            f"{', '.join(named)}{more}")


def _s(n: object) -> str:
    return "" if n == 1 else "s"


def _post(url: str, path: str, body: dict[str, Any], headers: dict[str, str],
          timeout_s: float) -> dict[str, Any]:
    try:
        response = httpx.post(url.rstrip("/") + path, content=orjson.dumps(body),
                              headers=headers, timeout=timeout_s)
    except httpx.HTTPError as exc:
        what = "acknowledge the batch (it will be exported again)" if "ack" in path else "reach"
        raise ConfigError(f"cannot {what} {url}: {type(exc).__name__}") from None
    if response.status_code != 200:
        raise ConfigError(f"{url}{path} answered {response.status_code}: {response.text[:200]}")
    return cast(dict[str, Any], response.json())


def _fsync_dir(path: str) -> None:
    with contextlib.suppress(OSError):  # some filesystems refuse fsync on a directory
        fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
