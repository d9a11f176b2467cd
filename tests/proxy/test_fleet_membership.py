"""An elastic fleet: ``seedproxy serve`` processes in front of fake SGLang servers add
servers at run time (``POST /fleet/upstreams``) once they pass the preflight and report
the fleet's weight version, and drain them (``DELETE /fleet/upstreams?url=``); replicas
on one Redis store follow the membership, a replica started later included."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from seedproxy import derive_seed
from seedproxy.fleet.pool import rendezvous_order
from tests.helpers.fake_sglang import tokens_for
from tests.helpers.fleet import Fleet
from tests.helpers.procs import free_port
from tests.helpers.waiting import wait_until
from tests.proxy.test_fleet_control import generate
from tests.proxy.test_fleet_replicas import Replica

ADMIN = "a" * 24
AUTH = {"authorization": f"Bearer {ADMIN}"}


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Replica]]:
    """``serve(upstream urls, *extra args)``: one ``seedproxy serve`` process, ready."""
    started: list[Replica] = []

    def start(urls: list[str], *extra: str) -> Replica:
        args = [a for url in urls for a in ("--upstream", url)]
        replica = Replica(*args, "--health-interval", "3600", *extra,
                          log=tmp_path / f"serve-{len(started)}.log")
        started.append(replica)
        return replica.wait()

    yield start
    for replica in started:
        replica.stop()
    for replica in started:
        assert b"Traceback" not in replica.log.read_bytes(), replica.log.read_text()


def members(replica: Replica) -> list[tuple[str, str]]:
    return [(u["url"], u["state"]) for u in replica.fleet()["upstreams"]]


def join(replica: Replica, url: str, **kwargs: Any) -> httpx.Response:
    return httpx.post(f"{replica.url}/fleet/upstreams", json={"url": url}, timeout=30, **kwargs)


def leave(replica: Replica, url: str, **kwargs: Any) -> httpx.Response:
    return httpx.delete(f"{replica.url}/fleet/upstreams", params={"url": url}, timeout=30,
                        **kwargs)


def homed(urls: list[str], home: str, count: int, prefix: str) -> list[str]:
    """``count`` session ids whose sticky server among ``urls`` is ``home``."""
    ids = (f"{prefix}-{i}" for i in range(10_000))
    return [s for s in ids if rendezvous_order(s, urls, str)[0] == home][:count]


def test_a_server_that_fails_the_preflight_is_refused_with_every_reason(
    fleet: Fleet, serve: Callable[..., Replica]
) -> None:
    a, b, c = fleet.servers
    info = c.switches.control.server_info
    info["enable_deterministic_inference"] = False
    info["speculative_algorithm"] = "EAGLE"
    proxy = serve([a.url, b.url])
    refused = join(proxy, c.url)
    assert refused.status_code == 409
    error = refused.json()["error"]
    assert (error["type"], error["code"], error["param"]) == (
        "conflict_error", "preflight_failed", "url")
    assert "deterministic inference is off" in error["message"]
    assert "speculative decoding (EAGLE) is on" in error["message"]
    assert members(proxy) == [(a.url, "active"), (b.url, "active")]
    for session in homed([a.url, b.url, c.url], c.url, 4, "pf"):
        assert generate(proxy.url, session, [1, 2], 3).status_code == 200
    assert c.received == []
    # fixed, it joins
    info["enable_deterministic_inference"] = True
    info["speculative_algorithm"] = None
    joined = join(proxy, c.url)
    assert joined.status_code == 201
    assert (joined.json()["deterministic"], joined.json()["state"]) == (True, "active")


def test_with_the_preflight_as_a_warning_a_nondeterministic_server_joins(
    fleet: Fleet, serve: Callable[..., Replica]
) -> None:
    a, b, _ = fleet.servers
    b.switches.control.server_info["sampling_backend"] = "flashinfer"
    proxy = serve([a.url], "--allow-nondeterministic-upstream")
    joined = join(proxy, b.url)
    assert joined.status_code == 201
    assert joined.json()["deterministic"] is False
    assert joined.json()["problems"] == [
        "sampling backend 'flashinfer' is not deterministic; fix: --sampling-backend pytorch"]
    assert b.url in [u for u, _ in members(proxy)]


def test_a_server_that_cannot_be_reached_is_refused(
    fleet: Fleet, serve: Callable[..., Replica]
) -> None:
    proxy = serve([fleet.servers[0].url])
    nowhere = f"http://127.0.0.1:{free_port()}"
    refused = join(proxy, nowhere)
    assert refused.status_code == 503
    assert refused.json()["error"]["message"].startswith(f"{nowhere} cannot join the fleet")
    assert members(proxy) == [(fleet.servers[0].url, "active")]


def test_new_sessions_land_on_an_added_server_by_rendezvous_with_the_same_seeds(
    fleet: Fleet, serve: Callable[..., Replica]
) -> None:
    """Adding c moves exactly the sessions that now rank c first; every session's seeds
    and tokens are what they would be without c (placement is not part of a seed)."""
    a, b, c = fleet.servers
    proxy = serve([a.url, b.url])
    sessions = [f"s-{i}" for i in range(24)]
    three = [a.url, b.url, c.url]
    before = {}
    for session in sessions:
        answer = generate(proxy.url, session, [3, 4], 4)
        before[session] = answer.headers["x-seedproxy-upstream"]
    joined = join(proxy, c.url)
    assert joined.status_code == 201, joined.text
    assert joined.json()["weight_version"] == "default"
    assert members(proxy) == [(a.url, "active"), (b.url, "active"), (c.url, "active")]
    assert join(proxy, c.url).status_code == 200  # already serving: nothing changes
    moved = []
    for session in sessions:
        answer = generate(proxy.url, session, [3, 4], 4)
        served = answer.headers["x-seedproxy-upstream"]
        assert served == rendezvous_order(session, three, str)[0]
        assert answer.headers["x-seedproxy-seed"] == str(derive_seed(session, 1))
        assert answer.json()["output_ids"] == tokens_for([3, 4], derive_seed(session, 1), 1.0, 4)
        if served != before[session]:
            moved.append(session)
    assert moved and all(rendezvous_order(s, three, str)[0] == c.url for s in moved)
    assert sorted(b["sampling_params"]["sampling_seed"] for b in c.received) == sorted(
        derive_seed(s, 1) for s in moved)


def test_a_drained_server_finishes_its_request_takes_no_new_one_then_leaves(
    fleet: Fleet, serve: Callable[..., Replica]
) -> None:
    a, b, _ = fleet.servers
    proxy = serve([a.url, b.url])
    first, *others = homed([a.url, b.url], b.url, 4, "d")
    control = b.switches.control
    control.hold_at = 2  # b's request stops after 2 tokens until released
    answers: list[httpx.Response] = []
    worker = threading.Thread(target=lambda: answers.append(generate(proxy.url, first, [7], 6)))
    worker.start()
    wait_until(lambda: control.held == 1)
    drained = leave(proxy, b.url)
    assert drained.status_code == 200
    assert drained.json() == {"url": b.url, "state": "draining", "inflight": 1}
    listed = {u["url"]: u for u in proxy.fleet()["upstreams"]}
    assert (listed[b.url]["state"], listed[b.url]["inflight"]) == ("draining", 1)
    assert leave(proxy, b.url).json()["state"] == "draining"  # told twice: the same
    ready = httpx.get(f"{proxy.url}/readyz").json()
    assert [u["reason"] for u in ready["upstreams"] if u["url"] == b.url] == [
        "draining: it left the fleet"]
    for session in others:  # b's sessions now go to a, with their own seeds
        answer = generate(proxy.url, session, [7], 3)
        assert answer.headers["x-seedproxy-upstream"] == a.url
        assert answer.json()["output_ids"] == tokens_for([7], derive_seed(session, 0), 1.0, 3)
    assert generate(proxy.url, first, [8], 2).headers["x-seedproxy-upstream"] == a.url
    assert len(b.received) == 1  # nothing new reached the draining server
    control.release.set()
    worker.join(60)
    assert answers[0].status_code == 200
    assert answers[0].headers["x-seedproxy-upstream"] == b.url
    assert answers[0].json()["output_ids"] == tokens_for([7], derive_seed(first, 0), 1.0, 6)
    wait_until(lambda: members(proxy) == [(a.url, "active")])
    assert len(b.received) == 1
    gone = leave(proxy, b.url)
    assert gone.status_code == 404 and gone.json()["error"]["type"] == "not_found_error"
    last = leave(proxy, a.url)
    assert last.status_code == 409 and last.json()["error"]["code"] == "last_upstream"
    # a drained server can join again
    assert join(proxy, b.url).status_code == 201
    assert generate(proxy.url, others[0], [9], 2).headers["x-seedproxy-upstream"] == b.url


def test_a_request_in_flight_on_a_drained_server_fails_over_with_its_seed(
    fleet: Fleet, serve: Callable[..., Replica]
) -> None:
    """x holds the request (paused) when x and y leave; x then breaks before its first
    token: the request fails over with the same seed, past y (gone meanwhile) to z."""
    proxy = serve(fleet.urls)
    session = "fo-1"
    x, y, z = (fleet.by_url(u) for u in rendezvous_order(session, fleet.urls, str))
    x.switches.break_stream_after = 0
    httpx.post(f"{x.url}/pause_generation", json={"mode": "in_place"}).raise_for_status()
    answers: list[tuple[int, str, str]] = []

    def ask() -> None:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 4, "stream": True}
        with httpx.stream("POST", f"{proxy.url}/sessions/{session}/v1/chat/completions",
                          json=body, timeout=60) as response:
            text = response.read().decode()
            answers.append((response.status_code, response.headers["x-seedproxy-upstream"],
                            text))

    worker = threading.Thread(target=ask)
    worker.start()
    wait_until(lambda: len(x.received) == 1)
    assert leave(proxy, x.url).json()["state"] == "draining"
    assert leave(proxy, y.url).json()["state"] == "removed"
    httpx.post(f"{x.url}/continue_generation", json={}).raise_for_status()
    worker.join(60)
    status, served, text = answers[0]
    assert (status, served) == (200, z.url)
    assert text.endswith("data: [DONE]\n\n") and '"error"' not in text
    assert y.received == []
    assert [b["seed"] for b in x.received + z.received] == [derive_seed(session, 0)] * 2
    wait_until(lambda: members(proxy) == [(z.url, "active")])


def test_a_server_with_nothing_in_flight_leaves_at_once(
    fleet: Fleet, serve: Callable[..., Replica]
) -> None:
    a, b, _ = fleet.servers
    proxy = serve([a.url, b.url])
    assert leave(proxy, b.url).json() == {"url": b.url, "state": "removed", "inflight": 0}
    assert members(proxy) == [(a.url, "active")]


def test_a_server_on_other_weights_is_refused_until_it_reports_the_fleets_version(
    fleet: Fleet, serve: Callable[..., Replica]
) -> None:
    a, b, _ = fleet.servers
    proxy = serve([a.url])
    httpx.post(f"{proxy.url}/fleet/weight_version", json={"version": "v3"}).raise_for_status()
    refused = join(proxy, b.url)
    assert refused.status_code == 409
    error = refused.json()["error"]
    assert error["code"] == "weight_version_mismatch"
    assert "it reports weight version 'default', the fleet is on 'v3'" in error["message"]
    assert members(proxy) == [(a.url, "active")]
    c = fleet.servers[2]
    c.switches.control.version = "v9"
    assert "the fleet is on 'v3'" in join(proxy, c.url).json()["error"]["message"]
    b.switches.control.version = "v3"  # its trainer loaded v3
    joined = join(proxy, b.url)
    assert joined.status_code == 201 and joined.json()["weight_version"] == "v3"
    (session,) = homed([a.url, b.url], b.url, 1, "w")
    answer = generate(proxy.url, session, [2], 3)
    assert answer.headers["x-seedproxy-upstream"] == b.url
    assert answer.json()["output_ids"] == tokens_for([2], derive_seed(session, 0), 1.0, 3, "v3")
    record = httpx.get(f"{proxy.url}/sessions/{session}/trajectory").json()["interactions"][0]
    assert (record["dispatch_weight_version"], record["weight_version"]) == ("v3", "v3")


def test_with_no_version_set_the_fleets_is_the_one_its_servers_report(
    fleet: Fleet, serve: Callable[..., Replica]
) -> None:
    a, b, c = fleet.servers
    a.switches.control.version = "v7"
    proxy = serve([a.url])
    refused = join(proxy, b.url).json()["error"]
    assert refused["code"] == "weight_version_mismatch"
    assert "it reports weight version 'default', the fleet is on 'v7'" in refused["message"]
    c.switches.control.version = "v7"
    assert join(proxy, c.url).status_code == 201


def test_replicas_follow_the_membership_and_a_later_replica_reads_it(
    fleet: Fleet, serve: Callable[..., Replica], redis_url: str
) -> None:
    a, b, _ = fleet.servers
    one = serve([a.url], "--store", redis_url)
    two = serve([a.url], "--store", redis_url)
    assert join(one, b.url).status_code == 201
    wait_until(lambda: members(two) == [(a.url, "active"), (b.url, "active")])
    (session,) = homed([a.url, b.url], b.url, 1, "r")
    assert generate(two.url, session, [5], 2).headers["x-seedproxy-upstream"] == b.url
    assert leave(two, a.url).status_code == 200
    wait_until(lambda: members(one) == [(b.url, "active")])
    # started later, with the removed server on its command line: the board wins
    three = serve([a.url], "--store", redis_url)
    assert members(three) == [(b.url, "active")]
    before = len(a.received)
    for i in range(3):
        answer = generate(three.url, f"late-{i}", [6], 2)
        assert answer.headers["x-seedproxy-upstream"] == b.url
    assert len(a.received) == before


def test_membership_routes_need_the_admin_key_and_check_what_they_are_given(
    fleet: Fleet, serve: Callable[..., Replica]
) -> None:
    a, b, _ = fleet.servers
    proxy = serve([a.url], "--admin-key", ADMIN)
    assert join(proxy, b.url).status_code == 401
    assert leave(proxy, a.url).status_code == 401
    assert httpx.delete(f"{proxy.url}/fleet/upstreams").status_code == 401
    url = f"{proxy.url}/fleet/upstreams"
    bad: list[tuple[Any, str]] = [
        ({"url": 5}, "url"),
        ({}, "url"),
        ({"url": b.url, "weight": 2}, "weight"),
        ({"url": "ftp://127.0.0.1:1"}, "must start with http:// or https://"),
        ({"url": f"{b.url}/v1"}, "ends in /v1"),
        ({"url": "http://"}, "names no host"),
        ({"url": f"{b.url}?x=1"}, "query or fragment"),
        ({"url": "http://x" + "y" * 3000}, "url"),
        ([b.url], "valid dictionary"),
    ]
    for body, named in bad:
        answer = httpx.post(url, json=body, headers=AUTH)
        assert answer.status_code == 400, (body, answer.text)
        error = answer.json()["error"]
        assert error["type"] == "invalid_request_error"
        assert named in f"{error['message']} {error['param']}", (body, error)
    assert httpx.post(url, content=b"{not json", headers=AUTH).status_code == 400
    for query in ("", "?url=", f"?url={a.url}&url={b.url}", "?url=http://h:1/v1"):
        answer = httpx.delete(url + query, headers=AUTH)
        assert answer.status_code == 400, (query, answer.text)
        assert answer.json()["error"]["param"] == "url"
    assert leave(proxy, b.url, headers=AUTH).status_code == 404
    assert members_with(proxy) == [a.url]
    assert b.received == [] and b.switches.control.calls == []
    assert join(proxy, b.url + "/", headers=AUTH).status_code == 201  # its root URL
    assert members_with(proxy) == [a.url, b.url]


def members_with(replica: Replica) -> list[str]:
    answer = httpx.get(f"{replica.url}/fleet", headers=AUTH, timeout=30)
    return [u["url"] for u in answer.json()["upstreams"]]

