"""The embedded engine's loopback port is the proxy's alone: ``seedproxy serve`` gives
it a random key per process and sends it on every call, so another local process can
neither pause it, nor set the weight version it records, nor generate through it."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from seedproxy.engine import start_engine_thread
from seedproxy.engine.testing import tiny_model
from tests.helpers.serving import Serving

ADMIN = {"authorization": "Bearer admin-key"}
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
_ATTACKS = [
    ("/pause_generation", {"mode": "abort"}),
    ("/continue_generation", {}),
    ("/update_weight_version", {"new_version": "forged", "abort_all_requests": False}),
    ("/generate", {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 2}}),
    ("/v1/chat/completions", CHAT),
]


def test_an_engine_with_a_key_refuses_every_route_but_health_without_it() -> None:
    engine = start_engine_thread(tiny_model(), api_key="k3y")
    try:
        with httpx.Client(base_url=engine.url, timeout=60) as client:
            assert client.get("/health").status_code == 200
            for path, body in _ATTACKS:
                for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": "k3y"}):
                    refused = client.post(path, json=body, headers=headers)
                    assert (refused.status_code, refused.json()) == (
                        401, {"error": "Unauthorized"}), (path, headers)
            assert client.get("/get_server_info").status_code == 401
            assert client.get("/v1/models").status_code == 401
            key = {"authorization": "Bearer k3y"}
            assert client.get("/get_server_info", headers=key).status_code == 200
            assert client.post("/v1/chat/completions", json=CHAT, headers=key).status_code == 200
    finally:
        engine.stop()


@pytest.fixture
def served(tiny_model_dir: Path, tmp_path: Path) -> Iterator[tuple[str, str]]:
    proxy = Serving("--model", str(tiny_model_dir), "--admin-key", "admin-key",
                    log=tmp_path / "serve.log")
    try:
        engine = proxy.line(r"embedded engine serving .* at (http://\S+)").group(1)
        yield proxy.wait(120).url, engine
    finally:
        proxy.stop(signal.SIGINT)


def test_serve_keys_its_engine_and_only_the_proxy_can_drive_it(served: tuple[str, str]) -> None:
    proxy, engine = served
    with httpx.Client(timeout=60) as client:
        for path, body in _ATTACKS:
            assert client.post(engine + path, json=body).status_code == 401, path
        # The proxy's own calls carry the key: requests, pause, weight version, info.
        assert client.post(f"{proxy}/v1/chat/completions", json=CHAT,
                           headers=ADMIN).status_code == 200
        paused = client.post(f"{proxy}/fleet/pause", json={"mode": "abort"}, headers=ADMIN)
        assert paused.json()["paused"] is True
        assert [u["ok"] for u in paused.json()["upstreams"]] == [True]
        assert [u["ok"] for u in client.post(f"{proxy}/fleet/continue",
                                             headers=ADMIN).json()["upstreams"]] == [True]
        versioned = client.post(f"{proxy}/fleet/weight_version", json={"version": "v7"},
                                headers=ADMIN).json()
        assert [u["ok"] for u in versioned["upstreams"]] == [True]
        fleet = client.get(f"{proxy}/fleet", headers=ADMIN).json()
        assert fleet["paused"] is False
        assert [(u["weight_version"], u["error"]) for u in fleet["upstreams"]] == [("v7", None)]
