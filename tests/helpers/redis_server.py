"""A throwaway ``redis-server`` on a free loopback port, for the Redis store's tests.

The system binary comes first (CI installs Debian's ``redis-server``). With no binary,
tests skip loudly on a developer's machine and fail under ``CI=true``: CI must never
pass without having run the Redis suite.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.helpers.procs import free_port

__all__ = ["RedisServer", "find_redis_server", "redis_or_skip"]

_CANDIDATES = ("/usr/bin/redis-server", "/usr/local/bin/redis-server")


def find_redis_server() -> str | None:
    found = shutil.which("redis-server")
    if found:
        return found
    return next((c for c in _CANDIDATES if Path(c).exists()), None)


_ATTEMPTS = 5


class _Exited(RuntimeError):
    """redis-server ended before it answered PING."""


class RedisServer:
    """One ``redis-server`` (``extra``: more of its arguments, e.g. ``--replicaof``)."""

    def __init__(self, binary: str, *extra: str) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="seedproxy-redis-")
        for attempt in range(_ATTEMPTS):
            # redis-server cannot say which port it bound, so one probed free is passed;
            # another process may take it first (then redis-server exits): try another.
            self.port = free_port()
            self._argv = [*self._arguments(binary, self._dir.name), "--port", str(self.port),
                          *extra]
            try:
                self.proc = self._spawn()
                break
            except _Exited:
                if attempt == _ATTEMPTS - 1:
                    raise

    def _arguments(self, binary: str, folder: str) -> list[str]:
        """The command line before ``--port``."""
        return [binary, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                "--dir", folder]

    def _spawn(self) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(self._argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.proc = proc
        self._wait()
        return proc

    def pause(self) -> None:
        """Freeze the server (SIGSTOP): connections stay open, nothing is answered."""
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def shut_down(self) -> None:
        """Stop the server, saving its data for ``start_again`` (clients' connections break)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as sock:
            sock.sendall(b"SHUTDOWN SAVE\r\n")
            sock.recv(64)  # the server closes the connection as it exits
        self.proc.wait(timeout=30)

    def start_again(self) -> None:
        """Start on the same port with the data ``shut_down`` saved."""
        self._spawn()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _wait(self) -> None:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise _Exited(f"redis-server exited with {self.proc.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("redis-server did not answer PING within 15s")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._dir.cleanup()


def redis_or_skip() -> str:
    """The redis-server binary; else fail (under CI) or skip with a loud reason."""
    binary = find_redis_server()
    if binary is not None:
        return binary
    message = (
        "redis-server NOT FOUND: the Redis store tests did not run. "
        "Install it (apt-get install redis-server) to run them."
    )
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(message + " CI=true requires it.", pytrace=False)
    pytest.skip(message)
