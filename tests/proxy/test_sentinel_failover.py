"""A Sentinel-managed Redis store (``redis+sentinel://``) with ``wait_replicas``: a write
no replica acknowledged is a 503, never a 200; and a ``seedproxy serve`` process keeps
answering through a failover (the primary SIGKILLed under load, a replica promoted by
Sentinel) with nothing acknowledged lost and no index handed out twice."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from seedproxy import derive_seed
from tests.conftest import Fake
from tests.helpers.redis_sentinel import SentinelSet
from tests.helpers.serving import Serving
from tests.helpers.turn_load import TurnLoad, check_recorded, turn_body
from tests.helpers.waiting import wait_until


@pytest.fixture
def sentinel_set() -> Iterator[SentinelSet]:
    servers = SentinelSet(replicas=2, sentinels=1)
    yield servers
    servers.stop()


def prefix() -> str:
    return f"prefix=t{uuid.uuid4().hex[:12]}:"


def test_a_write_no_replica_holds_is_a_503_and_its_retry_takes_the_same_index(
    fake: Fake, sentinel_set: SentinelSet, start_proxy: Callable[..., str]
) -> None:
    url = start_proxy([fake.url], store=sentinel_set.url(
        f"{prefix()}&wait_replicas=2&wait_timeout_s=0.5"))
    path = "/sessions/w/v1/chat/completions"
    first = httpx.post(url + path, json=turn_body("w", 0), timeout=60)
    assert first.status_code == 200, first.text
    assert first.headers["x-seedproxy-request-index"] == "0"

    replica = sentinel_set.replicas[0]
    replica.pause()  # one of the two replicas stops acknowledging
    try:
        refused = httpx.post(url + path, json=turn_body("w", 1), timeout=60)
    finally:
        replica.resume()
    assert refused.status_code == 503, refused.text
    error = refused.json()["error"]
    assert error["type"] == "store_error"
    assert "1 of the 2 replica(s)" in error["message"]
    assert len(fake.received) == 1  # the index was not durable: nothing went upstream

    retried = httpx.post(url + path, json=turn_body("w", 1), timeout=60,
                         headers={"x-stainless-retry-count": "1"})
    assert retried.status_code == 200, retried.text
    assert retried.headers["x-seedproxy-request-index"] == "1"
    assert retried.headers["x-seedproxy-seed"] == str(derive_seed("w", 1))
    recorded = httpx.get(f"{url}/sessions/w/trajectory", timeout=60).json()["interactions"]
    assert [i["request_index"] for i in recorded] == [0, 1]


def test_the_primary_sigkilled_under_load_loses_no_acknowledged_turn_and_reuses_no_index(
    fake: Fake, sentinel_set: SentinelSet, tmp_path: Path
) -> None:
    store = sentinel_set.url(f"{prefix()}&wait_replicas=1&timeout_s=5")
    proxy = Serving("--upstream", fake.url, "--store", store, log=tmp_path / "serve.log").wait()
    try:
        fake.switches.token_delay_s = 0.002
        sessions, turns = [f"fo-{n}" for n in range(6)], 10
        load = TurnLoad([proxy.url], sessions=sessions, turns=turns, workers=6)
        result: dict[str, object] = {}
        runner = threading.Thread(target=lambda: result.update(answers=load.run()))
        runner.start()
        load.wait_for(15)
        before = len(load.answers)
        old = sentinel_set.kill_primary()
        wait_until(lambda: sentinel_set.primary_port() != old)
        runner.join(timeout=300)
        assert not runner.is_alive() and "answers" in result
        assert before < len(sessions) * turns  # the primary died mid-load
        assert load.failures > 0  # some requests met the dead primary and were retried
        new = sentinel_set.primary_port()
        assert new in {r.port for r in sentinel_set.replicas}
        check_recorded(proxy.url, load.answers, sessions, turns)
        after = httpx.post(f"{proxy.url}/sessions/fo-0/v1/chat/completions",
                           json=turn_body("fo-0", turns), timeout=60)
        assert after.headers["x-seedproxy-request-index"] == str(turns)
    finally:
        proxy.stop()
    assert "Traceback" not in proxy.text()
