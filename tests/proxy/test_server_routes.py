"""SGLang's server routes through a real proxy in front of two fake SGLang servers:
outside a session they go to the least busy server; ``/flush_cache`` to every one."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import httpx
import pytest

from tests.helpers.fleet import Fleet
from tests.helpers.waiting import wait_until


@pytest.fixture
def fleet() -> Iterator[Fleet]:
    fleet = Fleet(2)
    for k, server in enumerate(fleet.servers):
        server.switches.control.server_info["model_path"] = f"model-{k}"
    yield fleet
    fleet.close()


def test_info_and_token_routes_go_to_the_least_busy_server(
        fleet: Fleet, start_proxy: Callable[..., str]) -> None:
    proxy = start_proxy(fleet.urls)
    for server in fleet.servers:
        server.switches.control.hold_at = 1
    body = {"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 3}}
    held: list[httpx.Response] = []
    worker = threading.Thread(target=lambda: held.append(
        httpx.post(proxy + "/generate", json=body, timeout=60)))
    worker.start()
    wait_until(lambda: sum(s.switches.control.held for s in fleet.servers) == 1)
    busy = next(s for s in fleet.servers if s.switches.control.held)
    idle = next(s for s in fleet.servers if s is not busy)
    idle_path = idle.switches.control.server_info["model_path"]
    try:
        for _ in range(3):  # every time the idle one, never the busy one
            info = httpx.get(proxy + "/get_server_info", timeout=30)
            assert info.status_code == 200 and info.json()["model_path"] == idle_path
            model = httpx.get(proxy + "/get_model_info", timeout=30).json()
            assert model["model_path"] == idle_path
    finally:
        for server in fleet.servers:
            server.switches.control.release.set()
        worker.join(30)
    assert held[0].status_code == 200
    assert httpx.get(proxy + "/health", timeout=30).status_code == 200
    tokens = httpx.post(proxy + "/tokenize", json={"prompt": "alpha beta"}, timeout=30)
    v1 = httpx.post(proxy + "/v1/tokenize", json={"prompt": "alpha beta"}, timeout=30)
    assert tokens.status_code == v1.status_code == 200 and tokens.json() == v1.json()
    text = httpx.post(proxy + "/detokenize", json={"tokens": tokens.json()["tokens"]},
                      timeout=30)
    assert text.status_code == 200 and text.json()["text"].split() == ["alpha", "beta"]
    assert httpx.get(proxy + "/healthz").status_code == 200
    assert httpx.get(proxy + "/readyz").json()["ready"] is True


def test_token_routes_refuse_a_bad_body_before_sending(
        fleet: Fleet, start_proxy: Callable[..., str]) -> None:
    proxy = start_proxy(fleet.urls, max_body_bytes=1024)
    before = [len(s.switches.control.calls) for s in fleet.servers]
    bad = httpx.post(proxy + "/tokenize", content=b"[1,", timeout=30)
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
    listed = httpx.post(proxy + "/tokenize", json=[1], timeout=30)
    assert listed.status_code == 400
    large = httpx.post(proxy + "/tokenize", json={"prompt": "x" * 2000}, timeout=30)
    assert large.status_code == 413
    assert [len(s.switches.control.calls) for s in fleet.servers] == before


def test_flush_cache_reaches_every_server_with_per_server_results(
        fleet: Fleet, start_proxy: Callable[..., str]) -> None:
    proxy = start_proxy(fleet.urls, admin_key="adm")
    admin = {"Authorization": "Bearer adm"}
    assert httpx.post(proxy + "/flush_cache", timeout=30).status_code == 401
    done = httpx.post(proxy + "/flush_cache", headers=admin, timeout=30)
    assert done.status_code == 200, done.text
    assert done.json() == {"success": True, "upstreams": [
        {"url": s.url, "ok": True, "status": 200, "error": None} for s in fleet.servers]}
    assert all(s.switches.control.calls[-1] == ("flush_cache", {}) for s in fleet.servers)
    first, second = fleet.servers
    second.switches.control.flushes = False
    refused = httpx.get(proxy + "/flush_cache", headers=admin, timeout=30)
    assert refused.status_code == 400
    results = refused.json()["upstreams"]
    assert [r["ok"] for r in results] == [True, False] and results[1]["status"] == 400
    second.stop()
    gone = httpx.post(proxy + "/flush_cache", headers=admin, timeout=30)
    assert gone.status_code == 503 and gone.json()["success"] is False
    assert gone.json()["upstreams"][1]["status"] is None
    assert httpx.get(proxy + "/health", timeout=30).status_code == 200  # open, no key
