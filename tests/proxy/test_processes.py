"""Real ``seedproxy serve`` processes: SIGKILL on SQLite loses nothing acknowledged,
SIGTERM drains in-flight requests, and two replicas on one Redis act as one proxy."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from seedproxy import derive_seed
from tests.conftest import Fake
from tests.helpers.serving import Serving
from tests.helpers.waiting import wait_until

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


@pytest.fixture
def procs() -> Iterator[list[Serving]]:
    started: list[Serving] = []
    yield started
    for proxy in started:
        if proxy.proc.poll() is None:
            proxy.stop(signal.SIGKILL)


def test_sigkill_on_sqlite_loses_no_acknowledged_interaction_and_reuses_no_index(
    fake: Fake, procs: list[Serving], tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path / 'state.db'}"
    first = Serving("--upstream", fake.url, "--store", db, log=tmp_path / "first.log").wait()
    procs.append(first)
    fake.switches.token_delay_s = 0.005
    acked: list[tuple[str, int, int]] = []
    lock = threading.Lock()
    stop = threading.Event()

    def drive(worker: int) -> None:
        session = f"crash-{worker % 3}"
        with httpx.Client(base_url=first.url, timeout=30) as http:
            n = 0
            while not stop.is_set():
                n += 1
                try:
                    if n % 2:
                        answer = http.post(f"/sessions/{session}/v1/chat/completions", json=BODY)
                        answer.read()
                    else:
                        with http.stream("POST", f"/sessions/{session}/v1/chat/completions",
                                         json={**BODY, "stream": True}) as answer:
                            body = b"".join(answer.iter_bytes())
                        if b"[DONE]" not in body:
                            continue  # the stream did not complete: not acknowledged
                except httpx.HTTPError:
                    return
                if answer.status_code == 200:
                    with lock:
                        acked.append((session, int(answer.headers["x-seedproxy-request-index"]),
                                      int(answer.headers["x-seedproxy-seed"])))

    with ThreadPoolExecutor(6) as pool:
        futures = [pool.submit(drive, w) for w in range(6)]
        while True:
            with lock:
                if len(acked) >= 40:
                    break
            if any(f.done() for f in futures):
                break
            time.sleep(0.01)
        first.stop(signal.SIGKILL)
        stop.set()
        for f in futures:
            f.result()
    assert len(acked) >= 40

    second = Serving("--upstream", fake.url, "--store", db, log=tmp_path / "second.log").wait()
    procs.append(second)
    with httpx.Client(base_url=second.url, timeout=30) as http:
        for session in sorted({s for s, _, _ in acked}):
            recorded = {i["request_index"]: i for i in
                        http.get(f"/sessions/{session}/trajectory").json()["interactions"]}
            mine = [(index, seed) for s, index, seed in acked if s == session]
            for index, seed in mine:
                assert index in recorded, f"{session} lost acknowledged index {index}"
                assert recorded[index]["seed"] == seed == derive_seed(session, index)
                assert recorded[index]["status"] == 200
            next_index = http.get(f"/sessions/{session}").json()["next_index"]
            after = http.post(f"/sessions/{session}/v1/chat/completions", json=BODY)
            index = int(after.headers["x-seedproxy-request-index"])
            assert index == next_index
            assert index > max(i for i, _ in mine) and index not in recorded
            assert all(i < index for i in recorded)


def test_sigterm_drains_a_slow_request_in_flight(
    fake: Fake, procs: list[Serving], tmp_path: Path
) -> None:
    proxy = Serving("--upstream", fake.url, log=tmp_path / "proxy.log").wait()
    procs.append(proxy)
    fake.switches.token_delay_s = 0.25  # 4 tokens: about 1 s
    result: dict[str, Any] = {}

    def slow() -> None:
        answer = httpx.post(
            f"{proxy.url}/sessions/drain/v1/chat/completions", json=BODY, timeout=30
        )
        result["status"] = answer.status_code
        result["body"] = answer.json()

    thread = threading.Thread(target=slow)
    thread.start()
    wait_until(lambda: len(fake.received) == 1)
    proxy.proc.send_signal(signal.SIGTERM)
    thread.join(timeout=30)
    assert result["status"] == 200
    assert result["body"]["choices"][0]["message"]["content"]
    # uvicorn re-raises the captured SIGTERM once drained: a clean death by SIGTERM
    assert proxy.stop() in (0, -signal.SIGTERM)
    assert b"Traceback" not in proxy.log.read_bytes()


def test_two_replicas_on_one_redis_act_as_one_proxy(
    fake: Fake, procs: list[Serving], tmp_path: Path, redis_url: str,
    start_proxy: Callable[..., str],
) -> None:
    replicas = [
        Serving("--upstream", fake.url, "--store", redis_url, log=tmp_path / f"r{n}.log")
        for n in range(2)
    ]
    procs.extend(replicas)
    for replica in replicas:
        replica.wait()
    total = 24

    def send(n: int) -> tuple[int, int, str]:
        target = replicas[n % 2]
        answer = httpx.post(
            f"{target.url}/sessions/shared/v1/chat/completions", json=BODY, timeout=30
        )
        assert answer.status_code == 200, answer.text
        return (
            int(answer.headers["x-seedproxy-request-index"]),
            int(answer.headers["x-seedproxy-seed"]),
            answer.json()["choices"][0]["message"]["content"],
        )

    with ThreadPoolExecutor(8) as pool:
        shared = sorted(pool.map(send, range(total)))
    assert [index for index, _, _ in shared] == list(range(total))

    single = start_proxy([fake.url])
    alone = []
    for _ in range(total):
        answer = httpx.post(f"{single}/sessions/shared/v1/chat/completions", json=BODY, timeout=30)
        alone.append(
            (
                int(answer.headers["x-seedproxy-request-index"]),
                int(answer.headers["x-seedproxy-seed"]),
                answer.json()["choices"][0]["message"]["content"],
            )
        )
    assert shared == alone
    # either replica sees the whole trajectory, in index order
    for replica in replicas:
        got = httpx.get(f"{replica.url}/sessions/shared/trajectory").json()["interactions"]
        assert [i["request_index"] for i in got] == list(range(total))
    # each replica wrote one JSON log line per request it served
    for replica in replicas:
        replica.stop()
    logged = []
    for replica in replicas:
        for line in replica.log.read_bytes().splitlines():
            if line.startswith(b"{"):
                logged.append(orjson.loads(line))
    assert sorted(line["index"] for line in logged if line["session"] == "shared") == list(
        range(total)
    )
