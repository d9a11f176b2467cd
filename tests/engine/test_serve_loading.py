"""``seedproxy serve`` with the embedded engine listens before the engine loads:
``/healthz`` answers at once, ``/readyz`` is 503 ("engine loading") until the engine is
ready, and requests sent meanwhile wait and get what they would have got after it.

The load is held on a FIFO (``_SEEDPROXY_HOLD_ENGINE_LOAD``): it starts only when the
test opens and closes it, so nothing here depends on how long a load takes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from seedproxy import derive_seed
from seedproxy.commands.serve import HOLD_ENGINE_LOAD_VAR
from tests.helpers.procs import seedproxy_env, wait_http
from tests.helpers.serving import Serving
from tests.helpers.waiting import wait_until

CHAT = {"model": "default", "max_tokens": 6, "temperature": 0.9, "logprobs": True,
        "messages": [{"role": "user", "content": "Write a short poem about the sea."}]}


@dataclass
class Held:
    served: Serving
    fifo: Path

    @property
    def url(self) -> str:
        return self.served.url

    @property
    def proc(self) -> subprocess.Popen[bytes]:
        return self.served.proc

    def release(self) -> None:
        with self.fifo.open("wb"):  # the load reads the FIFO to its end, then starts
            pass

    def readyz(self) -> httpx.Response:
        return httpx.get(f"{self.url}/readyz", timeout=60)


@contextlib.contextmanager
def _start_held(tmp_path: Path, *args: str) -> Iterator[Held]:
    fifo = tmp_path / "hold"
    os.mkfifo(fifo)
    served = Serving(*args, env=seedproxy_env(**{HOLD_ENGINE_LOAD_VAR: str(fifo)}),
                     log=tmp_path / "serve.log")
    try:
        yield Held(served, fifo)
    finally:
        served.stop(signal.SIGINT, timeout_s=60)  # killed if still held: the load never started


@pytest.fixture
def held(tmp_path: Path, tiny_model_dir: Path) -> Iterator[Held]:
    with _start_held(tmp_path, "--model", str(tiny_model_dir)) as started:
        yield started


def _waiting(held: Held, n: int) -> bool:
    return bool(held.readyz().json().get("waiting") == n)


def test_healthz_answers_before_the_engine_loads_and_readyz_turns_200_after(
        held: Held) -> None:
    wait_http(f"{held.url}/healthz", 120, held.proc)
    assert httpx.get(f"{held.url}/healthz").json() == {"status": "ok"}
    loading = held.readyz()
    assert loading.status_code == 503
    assert loading.json() == {"ready": False, "reason": "engine loading", "waiting": 0}
    held.release()
    wait_until(lambda: held.readyz().status_code == 200, 120)
    ready = held.readyz().json()
    assert ready["ready"] is True and ready["upstreams"][0]["up"] is True


def test_a_request_sent_while_loading_waits_and_gets_the_answer_of_one_sent_after(
        held: Held) -> None:
    wait_http(f"{held.url}/healthz", 120, held.proc)
    with ThreadPoolExecutor(1) as pool:
        early = pool.submit(httpx.post, f"{held.url}/sessions/warm/v1/chat/completions",
                            json=CHAT, timeout=120)
        wait_until(lambda: _waiting(held, 1))  # the request is in, held by the load
        assert not early.done()
        held.release()
        first = early.result()
    assert first.status_code == 200, first.text
    assert first.headers["x-seedproxy-seed"] == str(derive_seed("warm", 0))
    assert first.headers["x-seedproxy-request-index"] == "0"
    made = httpx.post(f"{held.url}/sessions", json={"identity": "warm"}).json()
    later = httpx.post(f"{made['sessions'][0]['base_url']}/chat/completions", json=CHAT,
                       timeout=120)
    assert later.headers["x-seedproxy-seed"] == first.headers["x-seedproxy-seed"]
    a, b = first.json(), later.json()
    assert a["choices"] == b["choices"] and a["usage"] == b["usage"]
    assert a["usage"]["completion_tokens"] == 6
    turns = [httpx.get(f"{held.url}/sessions/{sid}/trajectory").json()["interactions"]
             for sid in ("warm", made["sessions"][0]["session_id"])]
    assert len(turns[0]) == len(turns[1]) == 1
    for key in ("seed", "prompt_token_ids", "completion_token_ids", "logprobs"):
        assert turns[0][0][key] == turns[1][0][key], key


def test_a_request_that_waits_longer_than_the_load_wait_is_a_503_with_retry_after(
        tmp_path: Path, tiny_model_dir: Path) -> None:
    with _start_held(tmp_path, "--model", str(tiny_model_dir),
                     "--engine-load-wait-s", "0.001") as held:
        wait_http(f"{held.url}/healthz", 120, held.proc)
        chat = httpx.post(f"{held.url}/sessions/late/v1/chat/completions", json=CHAT)
        assert chat.status_code == 503 and chat.headers["retry-after"] == "5"
        assert chat.json()["error"]["message"].startswith("engine loading")
        assert chat.json()["error"]["type"] == "upstream_error"
        messages = httpx.post(f"{held.url}/v1/messages", json={
            "model": "default", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]})
        assert messages.status_code == 503 and messages.headers["retry-after"] == "5"
        assert messages.json()["type"] == "error"
        assert messages.json()["error"]["type"] == "overloaded_error"
        held.release()
        wait_until(lambda: held.readyz().status_code == 200, 120)
        again = httpx.post(f"{held.url}/sessions/late/v1/chat/completions", json=CHAT,
                           timeout=120)
        assert again.status_code == 200
        assert again.headers["x-seedproxy-request-index"] == "0"  # the 503 took no index


def test_a_load_that_fails_ends_serve_with_its_one_line_error(tmp_path: Path) -> None:
    model = tmp_path / "gpt2"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(
        {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"}))
    with _start_held(tmp_path, "--model", str(model)) as held:
        wait_http(f"{held.url}/healthz", 120, held.proc)
        with ThreadPoolExecutor(1) as pool:
            early = pool.submit(httpx.post, f"{held.url}/v1/chat/completions", json=CHAT,
                                timeout=120)
            wait_until(lambda: _waiting(held, 1))
            held.release()
            refused = early.result()
        assert held.proc.wait(timeout=120) == 2
        held.served.stop()  # all its stderr read
        lines = held.served.text().strip().splitlines()
        assert lines[-1].startswith("seedproxy: error: ") and str(model) in lines[-1]
        assert not any("Traceback" in line for line in lines)
        assert refused.status_code == 503
        error: dict[str, Any] = refused.json()["error"]
        assert error["message"] == "the engine failed to load: " + lines[-1].removeprefix(
            "seedproxy: error: ")
