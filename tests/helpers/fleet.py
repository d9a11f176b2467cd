"""Several fake SGLang servers on loopback that a test can stop and restart on the
same port (a server that dies and comes back)."""

from __future__ import annotations

from typing import Any

from tests.helpers.fake_sglang import Switches, create_fake_sglang
from tests.helpers.servers import ServerThread

__all__ = ["FakeServer", "Fleet"]


class FakeServer:
    def __init__(self) -> None:
        self.switches = Switches()
        self.app = create_fake_sglang(self.switches)
        self.server: ServerThread | None = ServerThread(self.app).start()
        self.port = self.server.port
        self.url = self.server.url

    @property
    def received(self) -> list[dict[str, Any]]:
        return self.switches.received

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    def restart(self) -> None:
        """Serve again on the same port (so the proxy's URL for it is unchanged)."""
        if self.server is None:
            self.server = ServerThread(self.app, port=self.port).start()


class Fleet:
    def __init__(self, size: int) -> None:
        self.servers = [FakeServer() for _ in range(size)]

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.servers]

    def by_url(self, url: str) -> FakeServer:
        return next(s for s in self.servers if s.url == url)

    def total_received(self) -> int:
        return sum(len(s.received) for s in self.servers)

    def close(self) -> None:
        for server in self.servers:
            server.stop()
