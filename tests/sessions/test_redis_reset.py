"""A Redis server that drops its connections is a store outage (503), on uvloop too.

uvloop answers a write on a connection that closed under it with a ``RuntimeError``
(MagicStack/uvloop#506) where asyncio's own loop raises ``ConnectionError``; a Sentinel
failover under load meets it when the old primary dies between connect and command.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator

import pytest
import uvloop

from seedproxy.errors import StoreError
from seedproxy.sessions.store.redis import RedisStore


@pytest.fixture
def resetting_port() -> Iterator[int]:
    """A TCP server that accepts each connection and resets it at once (RST)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    server.close()
    thread.join(timeout=5)


def test_every_call_to_a_resetting_server_is_a_store_error_on_uvloop(
        resetting_port: int) -> None:
    failures: list[BaseException] = []

    async def calls() -> None:
        store = RedisStore(f"redis://127.0.0.1:{resetting_port}/0")
        try:
            for _ in range(60):
                with pytest.raises(StoreError) as caught:
                    await store.get("s1")
                failures.append(caught.value)
        finally:
            await store.close()

    uvloop.run(calls())
    assert len(failures) == 60
    assert all(exc.status_code == 503 for exc in failures)
