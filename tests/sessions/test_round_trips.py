"""A request in a session costs at most two store round trips, in every store: the
seating (key, view and slot in one operation) and the record. Counted by a wrapper
that counts each store call of a real proxy (uvicorn on 127.0.0.1) in front of the fake
SGLang, and for Redis also by ``MONITOR`` on the real ``redis-server``: the commands
that name the store's keys."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from seedproxy.proxy.app import create_app
from seedproxy.sessions import SessionStore, open_store
from seedproxy.settings import Settings
from tests.conftest import Fake
from tests.helpers.servers import ServerThread
from tests.helpers.waiting import wait_until

TURNS = 4


class Counting:
    """A real store that counts its calls (each one round trip, or one transaction)."""

    def __init__(self, inner: SessionStore) -> None:
        self.inner = inner
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)
        if name in ("watch", "key_prefix", "client", "errors", "script", "run"):
            return method

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return await method(*args, **kwargs)

        return counted


class Monitor:
    """``MONITOR`` on a Redis server: the commands clients sent that name ``prefix``."""

    def __init__(self, url: str, prefix: str) -> None:
        parts = urlsplit(url)
        self._address = (parts.hostname or "127.0.0.1", parts.port or 6379)
        self._prefix = prefix.encode()
        self._sock = socket.create_connection(self._address)
        self._sock.sendall(b"MONITOR\r\n")
        self._lines: list[bytes] = []
        self._buffer = b""
        self._read_until(lambda line: line == b"+OK")

    def _read_until(self, done: Any) -> None:
        while True:
            while b"\r\n" in self._buffer:
                line, self._buffer = self._buffer.split(b"\r\n", 1)
                if done(line):
                    return
                self._lines.append(line)
            chunk = self._sock.recv(65536)
            if not chunk:
                raise ConnectionError("MONITOR connection closed")
            self._buffer += chunk

    def commands(self) -> int:
        """How many commands naming the prefix clients sent since the last call, less
        the ``EVALSHA`` of each script Redis did not hold yet (refused, then loaded
        and sent again: once per script and server). A marker command sent now is
        read back first, so every command run before it is counted."""
        marker = b"round-trip-marker"
        with socket.create_connection(self._address) as other:
            other.sendall(b"ECHO " + marker + b"\r\n")
            other.recv(1024)
        self._read_until(lambda line: marker in line)
        sent = [line for line in self._lines if b" lua] " not in line]  # a script's own
        self._lines = []
        loads = sum(1 for line in sent if b'"SCRIPT" "LOAD"' in line.upper())
        return sum(1 for line in sent if self._prefix in line) - loads

    def close(self) -> None:
        self._sock.close()


@pytest.fixture(params=["memory", "sqlite", "redis"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "redis":
        return str(request.getfixturevalue("redis_url"))
    return "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 's.db'}"


@pytest.fixture
def proxy(fake: Fake, store_url: str) -> Iterator[tuple[str, Counting]]:
    counting = Counting(open_store(store_url))
    server = ServerThread(create_app(Settings(upstream=[fake.url]), store=counting)).start()
    yield server.url, counting
    server.stop()


def _stream(http: httpx.Client, path: str, key: str | None, turn: int) -> None:
    body = {"model": "m", "stream": True, "max_tokens": 4,
            "messages": [{"role": "user", "content": f"turn {turn}"}]}
    headers = {"authorization": f"Bearer {key}"} if key else {}
    with http.stream("POST", path, json=body, headers=headers) as answer:
        assert answer.status_code == 200
        assert b"data: [DONE]" in b"".join(answer.iter_bytes())


def _turns(http: httpx.Client, counting: Counting, path: str, key: str | None,
           monitor: Monitor | None) -> list[tuple[list[str], int | None]]:
    """Each turn's store calls (and Redis commands), once its record is stored."""
    costs = []
    for turn in range(TURNS):
        before = len(counting.calls)
        recorded = counting.calls.count("record")
        _stream(http, path, key, turn)
        wait_until(lambda n=recorded: counting.calls.count("record") > n)
        commands = monitor.commands() if monitor is not None else None
        costs.append((counting.calls[before:], commands))
    return costs


@pytest.mark.parametrize("named", ["by key", "by path"])
def test_a_streamed_chat_request_in_a_session_costs_at_most_two_store_round_trips(
        named: str, proxy: tuple[str, Counting], store_url: str) -> None:
    url, counting = proxy
    monitor = None
    if store_url.startswith("redis"):
        prefix = store_url.split("prefix=", 1)[1]
        monitor = Monitor(store_url, prefix)
    try:
        with httpx.Client(base_url=url, timeout=60) as http:
            made = http.post("/sessions", json={"identity": "rt"})
            assert made.status_code == 201, made.text
            (member,) = made.json()["sessions"]
            if monitor is not None:
                monitor.commands()
            if named == "by key":
                costs = _turns(http, counting, "/v1/chat/completions", member["api_key"],
                               monitor)
            else:
                path = f"/sessions/{member['session_id']}/v1/chat/completions"
                costs = _turns(http, counting, path, None, monitor)
    finally:
        if monitor is not None:
            monitor.close()
    for calls, commands in costs:
        assert calls == ["allocate", "record"]
        assert commands is None or commands <= 2, costs
