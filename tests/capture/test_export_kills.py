"""Exports survive killed exporters and killed proxies: real ``seedproxy serve``
processes, an exporter that drops its connection part-way through the answer, and a
proxy SIGKILLed while it holds a lease (SQLite: restarted on the same file; Redis: the
other replica takes over). Every ended trajectory is in the end delivered and
acknowledged exactly once, none is lost, no open session is handed out, and every batch
keeps creation order.

No timing thresholds: a lease that must run out is waited for by polling the export
until it comes back, under a generous bound."""

from __future__ import annotations

import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.conftest import Fake
from tests.helpers.serving import Serving

MSG = [{"role": "user", "content": "hello"}]
RUN_OUT = 1.0  # visibility_timeout_s of a lease meant to run out
HOLD = 3600.0  # one meant to hold for the whole test
ENDED = 6


class Ledger:
    """What exporters saw: each delivered batch, and each acknowledged session."""

    def __init__(self, ended: list[str]) -> None:
        self.ended = ended
        self.delivered: list[list[str]] = []
        self.acked: list[str] = []

    def take(self, batch: dict[str, Any]) -> list[str]:
        ids = [t["session_id"] for t in batch["trajectories"]]
        assert ids == sorted(ids, key=self.ended.index), ids  # creation order, always
        if ids:
            self.delivered.append(ids)
        return ids

    def export(self, url: str, **body: Any) -> dict[str, Any]:
        answer = httpx.post(f"{url}/trajectories/export", json=body, timeout=60)
        assert answer.status_code == 200, answer.text
        data: dict[str, Any] = answer.json()
        self.take(data)
        return data

    def ack(self, url: str, batch: dict[str, Any]) -> None:
        answer = httpx.post(f"{url}/trajectories/ack", json={"batch_id": batch["batch_id"]},
                            timeout=60)
        assert answer.status_code == 200, answer.text
        self.acked.extend(t["session_id"] for t in batch["trajectories"])

    def drain(self, url: str, bound_s: float = 60.0) -> None:
        """Export and acknowledge until every ended session is acknowledged; leases that
        have not run out yet are polled for."""
        deadline = time.monotonic() + bound_s
        while set(self.acked) != set(self.ended):
            assert time.monotonic() < deadline, f"never delivered: {self.missing()}"
            batch = self.export(url, visibility_timeout_s=HOLD)
            if batch["trajectories"]:
                self.ack(url, batch)
            else:
                time.sleep(0.02)

    def missing(self) -> list[str]:
        return [s for s in self.ended if s not in self.acked]

    def check(self, url: str, still_open: str) -> None:
        assert sorted(self.acked) == sorted(self.ended)  # each exactly once, none lost
        assert len(self.acked) == len(set(self.acked))
        assert all(still_open not in ids for ids in self.delivered)
        state = {s: httpx.get(f"{url}/sessions/{s}", timeout=30).json()["exported"]
                 for s in [*self.ended, still_open]}
        assert state == {**dict.fromkeys(self.ended, True), still_open: False}
        assert self.export(url)["trajectories"] == []


def rollouts(url: str) -> tuple[list[str], str]:
    """``ENDED`` ended sessions (ended in reverse) and one left open."""
    with httpx.Client(base_url=url, timeout=60) as http:
        made = http.post("/sessions", json={"identity": "kill", "group_size": ENDED + 1}).json()
        ids = [s["session_id"] for s in made["sessions"]]
        for sid in ids:
            answer = http.post(f"/sessions/{sid}/v1/chat/completions", json={"messages": MSG})
            assert answer.status_code == 200, answer.text
        for sid in reversed(ids[:ENDED]):
            assert http.post(f"/sessions/{sid}/end").status_code == 200
    return ids[:ENDED], ids[ENDED]


def drop_mid_answer(url: str, **body: Any) -> bytes:
    """An exporter that sends an export, reads the first bytes of the answer, then
    resets the connection: the batch is leased, and the exporter never got it."""
    payload = orjson.dumps(body)
    port = int(url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(b"POST /trajectories/export HTTP/1.1\r\nhost: 127.0.0.1\r\n"
                     b"content-type: application/json\r\n"
                     b"content-length: %d\r\n\r\n%s" % (len(payload), payload))
        head = sock.recv(12)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    assert head.startswith(b"HTTP/1.1 200"), head
    return head


@pytest.fixture
def proxies(fake: Fake, tmp_path: Path) -> Iterator[list[Serving]]:
    started: list[Serving] = []
    yield started
    for proxy in started:
        if proxy.proc.poll() is None or proxy.proc.returncode != -signal.SIGKILL:
            proxy.stop()
            assert b"Traceback" not in proxy.log.read_bytes(), proxy.log.read_text()


def start(proxies: list[Serving], fake: Fake, store: str, tmp_path: Path) -> Serving:
    proxy = Serving("--upstream", fake.url, "--store", store,
                    log=tmp_path / f"proxy-{len(proxies)}.log").wait()
    proxies.append(proxy)
    return proxy


def test_memory_store_an_exporter_dropped_mid_answer_loses_nothing(
    fake: Fake, tmp_path: Path, proxies: list[Serving]
) -> None:
    proxy = start(proxies, fake, "memory://", tmp_path)
    ended, still_open = rollouts(proxy.url)
    ledger = Ledger(ended)
    drop_mid_answer(proxy.url, count=3, visibility_timeout_s=RUN_OUT)
    kept = ledger.export(proxy.url, count=2, visibility_timeout_s=HOLD)
    ledger.ack(proxy.url, kept)  # some acknowledged while the dropped lease is held
    ledger.drain(proxy.url)
    ledger.check(proxy.url, still_open)
    assert len(ledger.delivered) >= 2


def test_sqlite_a_dropped_exporter_and_a_proxy_killed_mid_lease_lose_nothing(
    fake: Fake, tmp_path: Path, proxies: list[Serving]
) -> None:
    store = f"sqlite:///{tmp_path / 'sessions.db'}"
    first = start(proxies, fake, store, tmp_path)
    ended, still_open = rollouts(first.url)
    ledger = Ledger(ended)
    drop_mid_answer(first.url, count=2, visibility_timeout_s=RUN_OUT)
    kept = ledger.export(first.url, count=2, visibility_timeout_s=HOLD)
    ledger.ack(first.url, kept)
    ledger.export(first.url, count=1, visibility_timeout_s=RUN_OUT)  # delivered, never acked
    first.kill()  # mid-lease
    second = start(proxies, fake, store, tmp_path)  # restarted on the same file
    ledger.drain(second.url)
    ledger.check(second.url, still_open)
    assert sum(len(ids) for ids in ledger.delivered) > len(ended)  # some came back


def test_redis_a_replica_killed_mid_lease_is_taken_over_by_the_other(
    fake: Fake, tmp_path: Path, proxies: list[Serving], redis_url: str
) -> None:
    store = redis_url
    one = start(proxies, fake, store, tmp_path)
    two = start(proxies, fake, store, tmp_path)
    ended, still_open = rollouts(one.url)
    ledger = Ledger(ended)
    drop_mid_answer(one.url, count=2, visibility_timeout_s=RUN_OUT)
    kept = ledger.export(two.url, count=2, visibility_timeout_s=HOLD)
    ledger.ack(one.url, kept)  # acknowledged on the replica that did not lease it
    ledger.export(one.url, count=1, visibility_timeout_s=RUN_OUT)  # delivered, never acked
    one.kill()  # mid-lease
    ledger.drain(two.url)
    ledger.check(two.url, still_open)
    assert sum(len(ids) for ids in ledger.delivered) > len(ended)  # some came back
