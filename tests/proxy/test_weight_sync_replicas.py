"""A weight sync told to one replica of a Redis store is the whole fleet's: two
``seedproxy serve`` processes on one Redis, in front of one fake SGLang server."""

from __future__ import annotations

import threading
from collections.abc import Callable

import httpx

from seedproxy import derive_seed
from tests.conftest import Fake
from tests.helpers.fake_sglang import tokens_for
from tests.helpers.waiting import wait_until
from tests.proxy.test_fleet_control import generate
from tests.proxy.test_fleet_replicas import Replica, paused_on, start_replicas

__all__ = ["start_replicas"]  # the fixture, imported for pytest


def test_a_sync_through_one_replica_pauses_continues_and_versions_the_other(
        fake: Fake, redis_url: str, start_replicas: Callable[..., list[Replica]]) -> None:
    a, b = start_replicas(redis_url, [], [])
    control = fake.switches.control
    control.weights_fail = "cannot read /ckpt/step-1"
    failed = httpx.post(f"{a.url}/fleet/update_weights",
                        json={"model_path": "/ckpt/step-1", "version": "step-1"}, timeout=60)
    assert failed.status_code == 502 and failed.json()["step"] == "load"
    wait_until(paused_on(b, True))  # B holds its requests too
    answers: list[httpx.Response] = []
    held = threading.Thread(target=lambda: answers.append(generate(b.url, "h-1", [3], 2)))
    held.start()
    wait_until(lambda: b.fleet()["waiting"] == 1)
    assert fake.received == []
    httpx.post(f"{a.url}/fleet/continue").raise_for_status()  # continue on the old weights
    held.join(60)
    assert answers[0].json()["output_ids"] == tokens_for([3], derive_seed("h-1", 0), 1.0, 2)

    control.weights_fail = None
    synced = httpx.post(f"{a.url}/fleet/update_weights",
                        json={"model_path": "/ckpt/step-1", "version": "step-1"}, timeout=60)
    assert synced.status_code == 200, synced.text
    after = generate(b.url, "h-2", [3], 2).json()  # no GET /fleet on B: the board told it
    assert after["output_ids"] == tokens_for([3], derive_seed("h-2", 0), 1.0, 2, "step-1")
    record = httpx.get(f"{b.url}/sessions/h-2/trajectory").json()["interactions"][0]
    assert record["dispatch_weight_version"] == "step-1"
    assert [name for name, _ in control.calls].count("update_weights_from_disk") == 2
    assert b.fleet()["paused"] is False


def test_two_replicas_never_interleave_syncs_the_second_is_a_409_naming_the_first(
        fake: Fake, redis_url: str, start_replicas: Callable[..., list[Replica]]) -> None:
    a, b = start_replicas(redis_url, [], [])
    control = fake.switches.control
    control.weights_hold = threading.Event()
    answers: list[httpx.Response] = []
    body = {"model_path": "/ckpt/step-1", "version": "step-1"}
    running = threading.Thread(target=lambda: answers.append(
        httpx.post(f"{a.url}/fleet/update_weights", json=body, timeout=60)))
    running.start()
    try:
        assert control.weights_entered.wait(30)  # A's sync is loading, held there
        second = httpx.post(f"{b.url}/fleet/update_weights",
                            json={"model_path": "/ckpt/step-2", "version": "step-2"},
                            timeout=60)
    finally:
        control.weights_hold.set()
        running.join(60)
    assert second.status_code == 409, second.text
    error = second.json()["error"]
    assert (error["type"], error["code"]) == ("conflict_error", "sync_in_progress")
    assert "'step-1'" in error["message"] and "'/ckpt/step-1'" in error["message"]
    assert answers[0].status_code == 200, answers[0].text
    assert [name for name, _ in control.calls].count("update_weights_from_disk") == 1
    control.weights_hold = None  # A's sync ended and released the lock: B may sync now
    again = httpx.post(f"{b.url}/fleet/update_weights",
                       json={"model_path": "/ckpt/step-2", "version": "step-2"}, timeout=60)
    assert again.status_code == 200, again.text
