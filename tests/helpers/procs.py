"""Run seedproxy as a real subprocess from this checkout's sources."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

__all__ = ["free_port", "seedproxy_env", "start_seedproxy", "wait_http"]

SRC = Path(__file__).resolve().parents[2] / "src"


def seedproxy_env(**extra: str) -> dict[str, str]:
    """The environment for a child: this checkout's ``src`` first on the path, and no
    ``SEEDPROXY_*`` leaking in from the caller."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEEDPROXY_")}
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def gone(pid: int) -> bool:
    """Whether process ``pid`` has exited: no such process, or a zombie (dead, not yet
    reaped). A process reaped between the open and the read fails the read with ESRCH."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return True


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_seedproxy(
    *args: str, env: dict[str, str] | None = None, **popen: object
) -> subprocess.Popen[bytes]:
    """Start ``python -m seedproxy ARGS`` from this checkout."""
    return subprocess.Popen(  # type: ignore[call-overload, no-any-return]
        [sys.executable, "-m", "seedproxy", *args],
        env=env or seedproxy_env(),
        **popen,
    )


def wait_http(
    url: str, timeout_s: float = 60.0, proc: subprocess.Popen[bytes] | None = None
) -> None:
    """Wait until ``url`` answers 200, or raise (early if ``proc`` died)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before {url} answered")
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url} did not answer within {timeout_s}s")
