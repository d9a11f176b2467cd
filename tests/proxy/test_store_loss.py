"""A SQLite store file deleted or replaced under a running proxy: ``/readyz`` and every
session request answer 503 naming the file (nothing is sent upstream, nothing is stored
in an unlinked file); a restart on the path starts a new file with a new store epoch,
whose indices (and seeds, which never depend on the epoch) start again at 0, and a
restart on the same file keeps its epoch."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from seedproxy import derive_seed
from tests.conftest import Fake
from tests.helpers.serving import Serving

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def run(fake: Fake) -> Iterator[list[Serving]]:
    started: list[Serving] = []
    yield started
    for proxy in started:
        if proxy.proc.poll() is None:
            proxy.stop()
            assert "Traceback" not in proxy.text()


def start(run: list[Serving], fake: Fake, path: Path) -> Serving:
    log = path.with_name(f"{path.name}-serve-{len(run)}.log")
    run.append(Serving("--upstream", fake.url, "--store", f"sqlite:///{path}", log=log).wait())
    return run[-1]


def ask(url: str, session: str) -> httpx.Response:
    return httpx.post(f"{url}/sessions/{session}/v1/chat/completions", json=BODY, timeout=30)


def epoch_of(url: str, session: str) -> str:
    answer = httpx.get(f"{url}/sessions/{session}", timeout=30)
    assert answer.status_code == 200, answer.text
    epoch: str = answer.json()["store_epoch"]
    return epoch


def assert_lost(url: str, path: Path, what: str) -> None:
    ready = httpx.get(f"{url}/readyz", timeout=30)
    assert ready.status_code == 503
    reason = ready.json()["store"]["reason"]
    assert str(path) in reason and what in reason, reason
    for answer in (ask(url, "s"), ask(url, "fresh"), httpx.get(f"{url}/sessions/s", timeout=30)):
        assert answer.status_code == 503, answer.text
        error = answer.json()["error"]
        assert error["type"] == "store_error" and what in error["message"]


def test_a_deleted_file_stops_the_store_and_a_restart_is_a_new_epoch(
    fake: Fake, run: list[Serving], tmp_path: Path
) -> None:
    path = tmp_path / "sessions.db"
    first = start(run, fake, path)
    taken = [ask(first.url, "s").headers["x-seedproxy-request-index"] for _ in range(2)]
    assert taken == ["0", "1"]
    old = epoch_of(first.url, "s")
    assert httpx.get(f"{first.url}/readyz", timeout=30).status_code == 200
    for name in (path.name, path.name + "-wal", path.name + "-shm"):
        (tmp_path / name).unlink(missing_ok=True)
    sent = len(fake.received)
    assert_lost(first.url, path, "deleted")
    assert len(fake.received) == sent  # nothing reached the upstream
    first.stop()
    second = start(run, fake, path)  # a new file
    answer = ask(second.url, "s")
    assert answer.headers["x-seedproxy-request-index"] == "0"
    assert answer.headers["x-seedproxy-seed"] == str(derive_seed("s", 0))  # seeds unchanged
    new = epoch_of(second.url, "s")
    assert len(new) == 16 and new != old
    trajectory = httpx.get(f"{second.url}/sessions/s/trajectory", timeout=30).json()
    assert "store_epoch" not in trajectory  # exports stay byte-identical across stores
    second.stop()
    third = start(run, fake, path)  # the same file: same epoch, indices go on
    assert ask(third.url, "s").headers["x-seedproxy-request-index"] == "1"
    assert epoch_of(third.url, "s") == new


def test_a_file_replaced_under_the_proxy_stops_the_store(
    fake: Fake, run: list[Serving], tmp_path: Path
) -> None:
    path = tmp_path / "sessions.db"
    proxy = start(run, fake, path)
    assert ask(proxy.url, "s").status_code == 200
    copy = tmp_path / "copy.db"
    with sqlite3.connect(path) as source, sqlite3.connect(copy) as target:
        source.backup(target)
    os.replace(copy, path)  # another file (an old backup, say) under the same name
    assert_lost(proxy.url, path, "replaced")
