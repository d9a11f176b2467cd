"""The fleet's control plane across replicas: ``seedproxy serve`` processes on one Redis
in front of one fake SGLang act as one control plane, whichever replica is told."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from seedproxy import derive_seed
from tests.conftest import Fake
from tests.helpers.fake_sglang import tokens_for
from tests.helpers.redis_server import RedisServer, redis_or_skip
from tests.helpers.serving import Serving
from tests.helpers.waiting import wait_until
from tests.proxy.test_fleet_control import generate, run_paused_load


class Replica(Serving):
    """One ``seedproxy serve`` process; its stderr goes to ``log``."""

    def fleet(self) -> dict[str, Any]:
        answer = httpx.get(f"{self.url}/fleet", timeout=30)
        assert answer.status_code == 200, answer.text
        return dict(answer.json())


@pytest.fixture
def start_replicas(fake: Fake, tmp_path: Path) -> Iterator[Callable[..., list[Replica]]]:
    """``start_replicas(store_url, [extra args], ...)``: one replica per list of extra
    arguments, all started together in front of ``fake``."""
    started: list[Replica] = []

    def start(store: str, *extras: list[str]) -> list[Replica]:
        replicas = [Replica("--upstream", fake.url, "--store", store, *extra,
                            log=tmp_path / f"replica-{len(started) + n}.log")
                    for n, extra in enumerate(extras)]
        started.extend(replicas)
        return [replica.wait() for replica in replicas]

    yield start
    for replica in started:
        replica.stop()
    for replica in started:
        assert b"Traceback" not in replica.log.read_bytes(), replica.log.read_text()


def paused_on(replica: Replica, paused: bool) -> Callable[[], bool]:
    return lambda: replica.fleet()["paused"] is paused


def test_an_abort_pause_through_one_replica_resumes_another_replicas_requests(
    fake: Fake, redis_url: str, start_replicas: Callable[..., list[Replica]]
) -> None:
    """B's rollouts, aborted by a pause told to A, are resubmitted by B after A's
    continue: one complete answer each, spans default then v2, as with one proxy."""
    a, b = start_replicas(redis_url, [], [])
    new = 12
    count = 8
    finals = run_paused_load(fake, b.url, "abort", bump="v2", count=count, new=new,
                             admin=a.url)
    for i in range(count):
        final = finals[i]
        assert final["meta_info"]["finish_reason"]["type"] == "length"
        ids, spans = final["output_ids"], final["meta_info"]["weight_versions"]
        assert spans == [{"version": "default", "start": 0, "end": 3},
                         {"version": "v2", "start": 3, "end": new}]
        assert final["meta_info"]["completion_tokens"] == new
        seed = derive_seed(f"r-{i}", 0)
        prompt = [i, i + 1]
        assert ids[:3] == tokens_for(prompt, seed, 1.0, 3)
        assert ids[3:] == tokens_for(prompt + ids[:3], seed, 1.0, new - 3, "v2")
        record = httpx.get(f"{b.url}/sessions/r-{i}/trajectory").json()["interactions"]
        assert [r["request_index"] for r in record] == [0]
        assert record[0]["completion_token_ids"] == ids
        assert record[0]["weight_versions"] == spans
        assert (record[0]["dispatch_weight_version"], record[0]["weight_version"]) == (
            "default", "v2")
    resubmitted = [body for body in fake.received if len(body["input_ids"]) == 5]
    assert len(resubmitted) == count
    assert all(body["sampling_params"]["max_new_tokens"] == new - 3 for body in resubmitted)


def test_a_version_change_that_aborts_through_one_replica_resumes_another_replicas_requests(
    fake: Fake, redis_url: str, start_replicas: Callable[..., list[Replica]]
) -> None:
    """No pause: A's weight-version change with abort_all_requests aborts B's running
    requests, and B sends the rest on the new weights."""
    a, b = start_replicas(redis_url, [], [])
    control = fake.switches.control
    control.hold_at = 3
    finals: dict[int, dict[str, Any]] = {}

    def rollout(i: int) -> None:
        finals[i] = generate(b.url, f"x-{i}", [i, 7], 8).json()

    workers = [threading.Thread(target=rollout, args=(i,)) for i in range(2)]
    for worker in workers:
        worker.start()
    wait_until(lambda: control.held == 2)
    httpx.post(f"{a.url}/fleet/weight_version",
               json={"version": "v4", "abort_all_requests": True}).raise_for_status()
    control.release.set()
    for worker in workers:
        worker.join(60)
    for i in range(2):
        ids = finals[i]["output_ids"]
        seed = derive_seed(f"x-{i}", 0)
        assert finals[i]["meta_info"]["finish_reason"]["type"] == "length"
        assert ids[:3] == tokens_for([i, 7], seed, 1.0, 3)
        assert ids[3:] == tokens_for([i, 7, *ids[:3]], seed, 1.0, 5, "v4")
        assert finals[i]["meta_info"]["weight_versions"] == [
            {"version": "default", "start": 0, "end": 3},
            {"version": "v4", "start": 3, "end": 8},
        ]


def test_a_pause_through_one_replica_holds_new_requests_at_every_replica(
    fake: Fake, redis_url: str, start_replicas: Callable[..., list[Replica]]
) -> None:
    a, b = start_replicas(redis_url, [], [])
    paused = httpx.post(f"{a.url}/fleet/pause", json={"mode": "in_place"}).json()
    assert paused["paused"] is True
    wait_until(paused_on(b, True))
    assert b.fleet()["mode"] == "in_place"
    answers: list[httpx.Response] = []
    worker = threading.Thread(target=lambda: answers.append(generate(b.url, "h-1", [1, 2], 4)))
    worker.start()
    wait_until(lambda: b.fleet()["waiting"] == 1)
    assert a.fleet()["waiting"] == 0  # each replica counts its own
    assert fake.received == []  # held at B, not sent to the paused server
    # a replica started while the fleet is paused starts paused, and keeps its own bound
    (c,) = start_replicas(redis_url, ["--pause-timeout", "0.2"])
    assert c.fleet()["paused"] is True
    refused = generate(c.url, "h-2", [1], 2)
    assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
    assert "paused (in_place)" in refused.json()["error"]["message"]
    assert fake.received == []
    resumed = httpx.post(f"{a.url}/fleet/continue").json()
    assert resumed["paused"] is False
    worker.join(30)
    assert answers[0].status_code == 200
    assert answers[0].json()["output_ids"] == tokens_for([1, 2], derive_seed("h-1", 0), 1.0, 4)
    wait_until(paused_on(b, False))
    wait_until(paused_on(c, False))
    assert generate(c.url, "h-2", [1], 2).status_code == 200


def test_a_weight_version_set_through_one_replica_is_the_dispatch_version_on_another(
    fake: Fake, redis_url: str, start_replicas: Callable[..., list[Replica]]
) -> None:
    """The server's /get_server_info fails, so B learns v3 only from the fleet board."""
    a, b = start_replicas(redis_url, [], [])
    fake.switches.control.info_status = 500
    assert b.fleet()["upstreams"][0]["weight_version"] == "default"
    httpx.post(f"{a.url}/fleet/weight_version", json={"version": "v3"}).raise_for_status()
    wait_until(lambda: b.fleet()["upstreams"][0]["weight_version"] == "v3")
    assert generate(b.url, "v-1", [5], 3).status_code == 200
    record = httpx.get(f"{b.url}/sessions/v-1/trajectory").json()["interactions"][0]
    assert (record["dispatch_weight_version"], record["weight_version"]) == ("v3", "v3")


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A redis-server of this test's own: the test restarts it."""
    server = RedisServer(redis_or_skip())
    yield server
    server.stop()


def test_replicas_follow_the_fleet_across_a_redis_restart(
    fake: Fake, own_redis: RedisServer, start_replicas: Callable[..., list[Replica]]
) -> None:
    """While Redis is down a pause is refused (503, no server told): a replica cannot
    pause the fleet alone. Once Redis is back, a pause through A reaches B."""
    a, b = start_replicas(f"{own_redis.url}?prefix=rs:&timeout_s=1", [], [])
    own_redis.shut_down()
    refused = httpx.post(f"{a.url}/fleet/pause", json={"mode": "in_place"}, timeout=30)
    assert refused.status_code == 503
    assert refused.json()["error"]["type"] == "store_error"
    assert fake.switches.control.calls == []
    assert a.fleet()["paused"] is False and b.fleet()["paused"] is False
    own_redis.start_again()
    wait_until(lambda: httpx.post(f"{a.url}/fleet/pause", json={"mode": "in_place"},
                                  timeout=30).status_code == 200)
    wait_until(paused_on(b, True))
    httpx.post(f"{b.url}/fleet/continue").raise_for_status()
    wait_until(paused_on(a, False))
    assert generate(a.url, "o-1", [1], 2).status_code == 200


def test_an_abort_that_outruns_the_boards_message_is_still_resumed(
    fake: Fake, redis_server: RedisServer, redis_url: str,
    start_replicas: Callable[..., list[Replica]]
) -> None:
    """Another replica moved the board's abort epoch and the servers aborted, but B has
    not received the board's message (here: the epoch is written with no message at
    all): B reads the board on the aborted answer and resumes, streamed or not."""
    (b,) = start_replicas(redis_url, [])
    control = fake.switches.control
    control.hold_at = 3
    finals: dict[int, dict[str, Any]] = {}

    def rollout(i: int) -> None:
        body = {"input_ids": [i, 9], "sampling_params": {"max_new_tokens": 6},
                "stream": i == 1}
        url = f"{b.url}/sessions/m-{i}/generate"
        if i == 0:
            finals[i] = httpx.post(url, json=body, timeout=60).json()
            return
        with httpx.stream("POST", url, json=body, timeout=60) as response:
            for line in response.iter_lines():
                if line.startswith("data: {"):
                    finals[i] = httpx.Response(200, content=line[6:]).json()

    workers = [threading.Thread(target=rollout, args=(i,)) for i in range(2)]
    for worker in workers:
        worker.start()
    wait_until(lambda: control.held == 2)
    prefix = redis_url.split("prefix=", 1)[1]
    direct = redis.Redis.from_url(redis_server.url)
    try:
        direct.hset(prefix + "fleet", mapping={"board": "other", "seq": 1, "epoch": 1})
    finally:
        direct.close()
    httpx.post(f"{fake.url}/abort_request", json={"abort_all": True}).raise_for_status()
    control.release.set()
    for worker in workers:
        worker.join(60)
    for i in range(2):
        seed = derive_seed(f"m-{i}", 0)
        assert finals[i]["meta_info"]["finish_reason"]["type"] == "length"
        assert finals[i]["output_ids"] == tokens_for([i, 9], seed, 1.0, 6)


def test_delete_through_one_replica_aborts_the_sessions_requests_on_another(
    fake: Fake, redis_url: str, start_replicas: Callable[..., list[Replica]]
) -> None:
    a, b = start_replicas(redis_url, [], [])
    control = fake.switches.control
    control.hold_at = 2  # B's request stops mid-generation until released
    answers: list[httpx.Response] = []
    worker = threading.Thread(target=lambda: answers.append(generate(b.url, "del-r", [4, 5], 8)))
    worker.start()
    wait_until(lambda: control.held == 1)
    rid = fake.received[-1]["rid"]
    assert httpx.delete(f"{a.url}/sessions/del-r").status_code == 204
    wait_until(lambda: ("abort", {"rid": rid}) in control.calls)  # B was told, and aborted
    control.release.set()
    worker.join(60)
    assert answers[0].status_code == 404
    assert answers[0].json()["error"]["type"] == "not_found_error"
    assert control.aborted == [rid]
