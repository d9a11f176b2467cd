"""``serve --workers N``: settings travel to the workers through the environment;
the single-process memory store refuses several workers."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from seedproxy.proxy.factory import settings_env
from seedproxy.seeds import derive_seed
from seedproxy.settings import Settings, load_settings
from tests.helpers.procs import start_seedproxy
from tests.helpers.serving import Serving


def test_settings_survive_the_trip_to_a_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings(
        upstream=["http://127.0.0.1:9001", "http://127.0.0.1:9002"],
        backend="vllm",
        port=1234,
        deterministic=False,
        admin_key="k",
        store="redis://127.0.0.1:6379/0",
        workers=3,
        seed=7,
        read_timeout_s=12.5,
        max_open_sessions=10,
        log_requests=False,
    )
    for key in list(__import__("os").environ):
        if key.startswith("SEEDPROXY_"):
            monkeypatch.delenv(key)
    for key, value in settings_env(settings).items():
        monkeypatch.setenv(key, value)
    assert load_settings({}) == settings


def test_several_workers_with_the_memory_store_is_a_one_line_error() -> None:
    proc = start_seedproxy(
        "serve", "--upstream", "http://127.0.0.1:9", "--workers", "2", stderr=subprocess.PIPE
    )
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    lines = err.decode().strip().splitlines()
    assert len(lines) == 1 and "memory store is single-process" in lines[0]


def test_two_workers_share_one_session_through_redis(
        fake: Any, redis_url: str, tmp_path: Path) -> None:
    # redis_url: a redis-server of this test worker's own, already answering PING.
    # --port 0: the workers share the one port the line "seedproxy listening" names.
    served = Serving("--upstream", fake.url, "--workers", "2", "--store", redis_url,
                     log=tmp_path / "serve.log")
    try:
        served.wait(timeout_s=180)
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        seeds = []
        for _ in range(6):  # new connections, so both workers take requests
            answer = httpx.post(
                f"{served.url}/sessions/w-1/v1/chat/completions",
                json=body,
                headers={"connection": "close"},
                timeout=30,
            )
            assert answer.status_code == 200
            seeds.append(int(answer.headers["x-seedproxy-seed"]))
        assert seeds == [derive_seed("w-1", i) for i in range(6)]
    finally:
        served.stop()


def test_hot_routes_keep_their_schema_and_other_methods(proxy: str) -> None:
    schema = httpx.get(f"{proxy}/openapi.json").json()
    assert "/v1/chat/completions" in schema["paths"]
    assert "/sessions/{session_id}/v1/chat/completions" in schema["paths"]
    assert httpx.get(f"{proxy}/v1/chat/completions").status_code == 405
    assert httpx.post(f"{proxy}/sessions/s/v1/nothing", json={}).status_code == 404
