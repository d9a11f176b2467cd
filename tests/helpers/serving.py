"""``seedproxy serve`` as a real subprocess on a port it binds itself.

It is started with ``--port 0`` and its port is read from the line it logs once it
listens, so no other process can take the port between choosing and binding it (a port
probed free beforehand can be taken by any client's outgoing connection meanwhile)."""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Self

from tests.helpers.procs import start_seedproxy, wait_http

__all__ = ["LISTENING", "Serving"]

LISTENING = r"seedproxy listening on http://\S*:(\d+)"
"""The line ``serve`` logs once its socket listens; group 1 is the port."""


class Serving:
    """One ``python -m seedproxy COMMAND --port 0 ARGS`` process (``serve``, or
    ``launch``, which serves the proxy the same way). Its stderr is read on a thread into
    ``lines`` and appended to ``log`` as it comes (a full pipe never blocks it); ``stop``
    returns once all of it is in ``log``."""

    def __init__(self, *args: str, log: Path, env: dict[str, str] | None = None,
                 command: str = "serve") -> None:
        self.log = log
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._ended = False
        self._port: int | None = None
        self._command = command
        self.proc = start_seedproxy(command, "--port", "0", *args, env=env,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self._reader = threading.Thread(target=self._read, daemon=True,
                                        name=f"serve-stderr-{self.proc.pid}")
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        with self.log.open("ab") as out:
            for raw in self.proc.stderr:
                out.write(raw)
                out.flush()
                with self._changed:
                    self.lines.append(raw.decode(errors="replace"))
                    self._changed.notify_all()
        self.proc.stderr.close()
        with self._changed:
            self._ended = True
            self._changed.notify_all()

    def line(self, pattern: str, timeout_s: float = 120.0) -> re.Match[str]:
        """The first stderr line that ``pattern`` matches, waiting for it; raises with
        what the process wrote if it ends first or the wait runs out."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout_s
        seen = 0
        with self._changed:
            while True:
                for text in self.lines[seen:]:
                    if found := regex.search(text):
                        return found
                seen = len(self.lines)
                left = deadline - time.monotonic()
                if self._ended or left <= 0:
                    how = "exited" if self._ended else f"did not write it within {timeout_s}s"
                    raise RuntimeError(f"seedproxy {self._command} {how} before a line matching "
                                       f"{pattern!r}; its stderr:\n{self.text()[-4000:]}")
                self._changed.wait(left)

    def text(self) -> str:
        """What the process has written to stderr so far."""
        return "".join(self.lines)

    @property
    def port(self) -> int:
        if self._port is None:
            self._port = int(self.line(LISTENING).group(1))
        return self._port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait(self, timeout_s: float = 60.0) -> Self:
        """Return once ``/healthz`` answers 200; raises with the process's stderr."""
        try:
            wait_http(f"{self.url}/healthz", timeout_s=timeout_s, proc=self.proc)
        except (RuntimeError, TimeoutError) as exc:
            self._reader.join(timeout=5)
            raise RuntimeError(f"{exc}; its stderr:\n{self.text()[-4000:]}") from None
        return self

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 30.0) -> int:
        """Signal the process (unless it has ended), wait for it (killing it after
        ``timeout_s``) and for its stderr; its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self._reader.join(timeout=timeout_s)
        return code

    def kill(self) -> int:
        return self.stop(signal.SIGKILL)
