"""``--max-open-sessions`` holds under concurrency: the count and the create are one
atomic step in every store, so sessions created at once (by ``POST /sessions``, by a
request naming a new session, by groups, on two replicas of one Redis) never exceed
the cap, and a group either fits whole or creates nothing."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Fake
from tests.proxy.test_fleet_replicas import Replica

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
CAP = 3
CALLERS = 24


def at_once(calls: list[Callable[[], httpx.Response]]) -> list[httpx.Response]:
    """Run ``calls`` from as many threads, released together."""
    answers: list[httpx.Response | None] = [None] * len(calls)
    gate = threading.Barrier(len(calls))

    def run(i: int) -> None:
        gate.wait()
        answers[i] = calls[i]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert all(a is not None for a in answers)
    return [a for a in answers if a is not None]


def caller(url: str, path: str, body: dict[str, Any]) -> Callable[[], httpx.Response]:
    return lambda: httpx.post(f"{url}{path}", json=body, timeout=60)


@pytest.fixture(params=["sqlite", "redis"])
def urls(request: pytest.FixtureRequest, fake: Fake, tmp_path: Path) -> Iterator[list[str]]:
    """Two ``seedproxy serve`` processes on one store with the cap: two replicas of one
    Redis, or two proxies on one SQLite file."""
    if request.param == "sqlite":
        store = f"sqlite:///{tmp_path / 'cap.db'}"
    else:
        store = request.getfixturevalue("redis_url")
    replicas = [Replica("--upstream", fake.url, "--store", store, "--max-open-sessions",
                        str(CAP), log=tmp_path / f"replica-{n}.log") for n in range(2)]
    try:
        yield [replica.wait().url for replica in replicas]
    finally:
        for replica in replicas:
            replica.stop()
        for replica in replicas:
            assert b"Traceback" not in replica.log.read_bytes(), replica.log.read_text()


def open_count(url: str) -> int:
    listed = httpx.get(f"{url}/sessions", timeout=60).json()["sessions"]
    return sum(1 for s in listed if s["state"] == "open")


def test_sessions_created_at_once_never_exceed_the_cap(urls: list[str]) -> None:
    calls = []
    for i in range(CALLERS):
        url = urls[i % 2]
        if i % 3 == 0:
            calls.append(caller(url, f"/sessions/new{i}/v1/chat/completions", BODY))
        else:
            calls.append(caller(url, "/sessions", {"identity": f"made{i}"}))
    answers = at_once(calls)
    statuses = sorted(a.status_code for a in answers)
    created = [a for a in answers if a.status_code in (200, 201)]
    assert len(created) == CAP, statuses
    assert statuses.count(429) == CALLERS - CAP, statuses
    assert open_count(urls[0]) == CAP


def test_groups_created_at_once_fit_whole_or_create_nothing(urls: list[str]) -> None:
    calls = [caller(urls[i % 2], "/sessions", {"identity": f"g{i}", "group_size": 2})
             for i in range(CALLERS // 2)]
    calls += [caller(urls[i % 2], "/sessions", {"identity": f"one{i}"})
              for i in range(CALLERS // 2)]
    answers = at_once(calls)
    made = [len(a.json()["sessions"]) for a in answers if a.status_code == 201]
    assert all(a.status_code in (201, 429) for a in answers)
    assert 0 < sum(made) <= CAP and sum(made) == open_count(urls[0])
    assert made.count(2) <= 1  # two groups of two never fit in three
    for i, answer in enumerate(answers[:CALLERS // 2]):  # a refused group left nothing
        found = httpx.get(f"{urls[0]}/sessions/g{i}:1", timeout=60).status_code
        assert (found, answer.status_code) in ((200, 201), (404, 429))
        found = httpx.get(f"{urls[0]}/sessions/g{i}:0", timeout=60).status_code
        assert (found, answer.status_code) in ((200, 201), (404, 429))
