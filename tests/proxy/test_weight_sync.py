"""``POST /fleet/update_weights`` and the NCCL weight routes through a real proxy in front
of two fake SGLang servers: the sync's steps in order on every server, a failed load
that leaves the fleet paused (502 naming the server), and the fan-out of SGLang's
``init_weights_update_group`` / ``update_weights_from_distributed`` /
``update_weights_from_tensor`` / ``destroy_weights_update_group`` with per-server answers."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from seedproxy import derive_seed
from tests.helpers.fake_sglang import tokens_for
from tests.helpers.fleet import Fleet
from tests.proxy.test_fleet_control import generate


@pytest.fixture
def fleet() -> Iterator[Fleet]:
    servers = Fleet(2)
    yield servers
    servers.close()


def sync(proxy: str, **body: Any) -> httpx.Response:
    return httpx.post(f"{proxy}/fleet/update_weights", json=body, timeout=60)


def control_calls(fleet: Fleet) -> list[list[tuple[str, dict[str, Any]]]]:
    return [s.switches.control.calls for s in fleet.servers]


def test_a_sync_pauses_loads_everywhere_records_the_version_and_continues(
        fleet: Fleet, start_proxy: Callable[..., str]) -> None:
    proxy = start_proxy(fleet.urls)
    assert generate(proxy, "s-1", [5], 3).status_code == 200
    answer = sync(proxy, model_path="/ckpt/step-1", version="step-1")
    assert answer.status_code == 200, answer.text
    state = answer.json()
    assert (state["paused"], state["step"], state["weight_version"]) == (False, "continue",
                                                                       "step-1")
    assert [(r["url"], r["ok"], r["answer"]) for r in state["upstreams"]] == [
        (url, True, {"success": True, "message": "Succeeded.", "num_paused_requests": 0})
        for url in fleet.urls]
    load = {"model_path": "/ckpt/step-1", "weight_version": "step-1",
            "abort_all_requests": False}
    for calls in control_calls(fleet):
        assert calls == [("pause", {"mode": "in_place"}), ("update_weights_from_disk", load),
                         ("continue", {})]
    after = generate(proxy, "s-1", [5], 3).json()
    assert after["output_ids"] == tokens_for([5], derive_seed("s-1", 1), 1.0, 3, "step-1")
    second = httpx.get(f"{proxy}/sessions/s-1/trajectory").json()["interactions"][1]
    assert (second["dispatch_weight_version"], second["weight_version"]) == ("step-1", "step-1")


def test_a_load_that_fails_on_one_server_leaves_the_fleet_paused_with_a_502_naming_it(
        fleet: Fleet, start_proxy: Callable[..., str]) -> None:
    proxy = start_proxy(fleet.urls)
    good, bad = fleet.servers
    bad.switches.control.weights_fail = "shapes differ: intermediate_size"
    answer = sync(proxy, model_path="/ckpt/step-2", version="step-2", mode="retract",
                  load_format="safetensors")
    assert answer.status_code == 502
    body = answer.json()
    assert body["error"]["type"] == "upstream_error"
    assert bad.url in body["error"]["message"] and good.url not in body["error"]["message"]
    assert "shapes differ: intermediate_size" in body["error"]["message"]
    assert (body["paused"], body["mode"], body["step"]) == (True, "retract", "load")
    assert [(r["url"], r["ok"], r["status"]) for r in body["upstreams"]] == [
        (good.url, True, 200), (bad.url, False, 400)]
    assert body["weight_version"] is None
    for calls in control_calls(fleet):  # nothing continued on mixed weights
        assert [name for name, _ in calls] == ["pause", "update_weights_from_disk"]
        assert calls[1][1]["load_format"] == "safetensors"
    assert httpx.get(f"{proxy}/fleet").json()["paused"] is True
    bad.switches.control.weights_fail = None  # the admin fixes the server and retries
    retried = sync(proxy, model_path="/ckpt/step-2", version="step-2")
    assert retried.status_code == 200 and retried.json()["paused"] is False
    assert [s.switches.control.weights for s in fleet.servers] == ["/ckpt/step-2"] * 2


def test_an_unreachable_server_fails_the_pause_and_nothing_is_loaded(
        fleet: Fleet, start_proxy: Callable[..., str]) -> None:
    proxy = start_proxy(fleet.urls)
    fleet.servers[1].stop()
    answer = sync(proxy, model_path="/ckpt/step-3", version="step-3")
    assert answer.status_code == 502
    body = answer.json()
    assert (body["step"], body["paused"]) == ("pause", True)
    assert fleet.urls[1] in body["error"]["message"]
    assert [name for name, _ in fleet.servers[0].switches.control.calls] == ["pause"]
    resumed = httpx.post(f"{proxy}/fleet/continue").json()  # the admin's way out
    assert resumed["paused"] is False


def test_a_second_sync_while_one_runs_is_a_409_naming_it_and_no_server_is_told(
        fleet: Fleet, start_proxy: Callable[..., str]) -> None:
    proxy = start_proxy(fleet.urls)
    first = fleet.servers[0].switches.control
    first.weights_hold = threading.Event()
    answers: list[httpx.Response] = []
    running = threading.Thread(target=lambda: answers.append(
        sync(proxy, model_path="/ckpt/step-1", version="step-1")))
    running.start()
    try:
        assert first.weights_entered.wait(30)  # the first sync is loading, held there
        second = sync(proxy, model_path="/ckpt/step-2", version="step-2")
    finally:
        first.weights_hold.set()
        running.join(60)
    assert second.status_code == 409, second.text
    error = second.json()["error"]
    assert (error["type"], error["code"], error["param"]) == (
        "conflict_error", "sync_in_progress", None)
    assert "'step-1'" in error["message"] and "'/ckpt/step-1'" in error["message"]
    assert answers[0].status_code == 200, answers[0].text
    for calls in control_calls(fleet):  # the refused sync told nobody anything
        assert [name for name, _ in calls] == ["pause", "update_weights_from_disk",
                                               "continue"]
        assert calls[1][1]["weight_version"] == "step-1"
    first.weights_hold = None  # ended, the lock is free again
    assert sync(proxy, model_path="/ckpt/step-2", version="step-2").status_code == 200
    assert httpx.get(f"{proxy}/fleet").json()["upstreams"][0]["weight_version"] == "step-2"


@pytest.mark.parametrize("bad", [
    {"version": "v"}, {"model_path": "/m"}, {"model_path": "", "version": "v"},
    {"model_path": "/m", "version": "v", "mode": "sideways"},
    {"model_path": "/m", "version": 3}, {"model_path": "/m", "version": "v", "extra": 1},
])
def test_a_bad_sync_body_is_a_400_and_no_server_is_told(
        bad: dict[str, Any], fleet: Fleet, start_proxy: Callable[..., str]) -> None:
    proxy = start_proxy(fleet.urls)
    answer = httpx.post(f"{proxy}/fleet/update_weights", json=bad)
    assert answer.status_code == 400 and answer.json()["error"]["type"] == \
        "invalid_request_error"
    assert control_calls(fleet) == [[], []]


def test_weight_routes_need_the_admin_key(fleet: Fleet, start_proxy: Callable[..., str]) -> None:
    proxy = start_proxy(fleet.urls, admin_key="k" * 16)
    for path in ["update_weights", "init_weights_update_group",
                 "update_weights_from_distributed", "update_weights_from_tensor",
                 "destroy_weights_update_group"]:
        assert httpx.post(f"{proxy}/fleet/{path}", json={}).status_code == 401
    assert control_calls(fleet) == [[], []]


GROUP = {"master_address": "10.0.0.1", "master_port": 29500, "rank_offset": 1,
         "world_size": 5, "group_name": "g1", "backend": "nccl", "rank_stride": 2}


def test_init_weights_update_group_gives_each_server_its_ranks(
        fleet: Fleet, start_proxy: Callable[..., str]) -> None:
    proxy = start_proxy(fleet.urls)
    answer = httpx.post(f"{proxy}/fleet/init_weights_update_group", json=GROUP)
    assert answer.status_code == 200, answer.text
    assert [(r["url"], r["rank_offset"], r["answer"]) for r in answer.json()["upstreams"]] == [
        (url, offset, {"success": True, "message": "Succeeded."})
        for url, offset in zip(fleet.urls, [1, 3], strict=True)]
    sent = {k: v for k, v in GROUP.items() if k != "rank_stride"}
    assert control_calls(fleet) == [[("init_weights_update_group", {**sent, "rank_offset": 1})],
                                    [("init_weights_update_group", {**sent, "rank_offset": 3})]]
    small = httpx.post(f"{proxy}/fleet/init_weights_update_group",
                       json={**GROUP, "world_size": 4})
    assert small.status_code == 400 and small.json()["error"]["param"] == "world_size"
    assert len(control_calls(fleet)[0]) == 1


def test_distributed_and_tensor_updates_go_to_every_server_and_record_the_version(
        fleet: Fleet, start_proxy: Callable[..., str]) -> None:
    proxy = start_proxy(fleet.urls)
    dist = {"names": ["lm_head.weight"], "dtypes": ["bfloat16"], "shapes": [[8, 4]],
            "group_name": "g1", "flush_cache": True, "abort_all_requests": False,
            "weight_version": "step-7"}
    answer = httpx.post(f"{proxy}/fleet/update_weights_from_distributed", json=dist)
    assert answer.status_code == 200, answer.text
    assert all(r["ok"] for r in answer.json()["upstreams"])
    for calls in control_calls(fleet):
        assert calls == [("update_weights_from_distributed", dist)]
    assert [s.switches.control.version for s in fleet.servers] == ["step-7"] * 2
    after = generate(proxy, "d-1", [5], 2)
    record = httpx.get(f"{proxy}/sessions/d-1/trajectory").json()["interactions"][0]
    assert after.status_code == 200 and record["dispatch_weight_version"] == "step-7"
    fleet.servers[0].switches.control.weights_fail = "no group g1"
    tensor = {"serialized_named_tensors": ["AAAA"], "weight_version": "step-8"}
    failed = httpx.post(f"{proxy}/fleet/update_weights_from_tensor", json=tensor)
    assert failed.status_code == 502
    assert fleet.urls[0] in failed.json()["error"]["message"]
    assert [r["ok"] for r in failed.json()["upstreams"]] == [False, True]
    assert fleet.servers[1].switches.control.calls[-1] == ("update_weights_from_tensor", {
        "serialized_named_tensors": ["AAAA"], "load_format": None, "flush_cache": True,
        "abort_all_requests": False, "weight_version": "step-8"})
    destroyed = httpx.post(f"{proxy}/fleet/destroy_weights_update_group",
                           json={"group_name": "g1"})
    assert destroyed.status_code == 502  # server 0 still fails
    uneven = httpx.post(f"{proxy}/fleet/update_weights_from_distributed",
                        json={**dist, "shapes": []})
    assert uneven.status_code == 400
