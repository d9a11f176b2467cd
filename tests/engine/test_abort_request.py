"""The engine's ``/abort_request``: a running request named by its ``rid`` ends with
``finish_reason`` abort at its next step, as in SGLang; through the proxy, a client
that leaves a stream has its request aborted (tests/proxy/test_aborts.py)."""

from __future__ import annotations

import httpx
import orjson
import pytest

from seedproxy.engine import RunningEngine


def test_abort_request_ends_a_running_generation(engine: RunningEngine) -> None:
    body = {"input_ids": [1, 2, 3], "rid": "long-1", "stream": True,
            "sampling_params": {"max_new_tokens": 400, "ignore_eos": True}}
    finals = []
    with httpx.Client(base_url=engine.url, timeout=60) as http:
        with http.stream("POST", "/generate", json=body) as response:
            for line in response.iter_lines():
                if not line.startswith("data: {"):
                    continue
                item = orjson.loads(line[6:])
                if len(finals) == 0:
                    assert http.post("/abort_request", json={"rid": "long-1"}).status_code == 200
                finals.append(item)
    last = finals[-1]["meta_info"]
    assert last["finish_reason"]["type"] == "abort"
    assert last["completion_tokens"] < 400


@pytest.mark.parametrize("body", [{}, {"rid": 5}, {"rid": ""}])
def test_abort_request_needs_a_rid(client: httpx.Client, body: dict[str, object]) -> None:
    assert client.post("/abort_request", json=body).status_code == 400


def test_abort_of_an_unknown_rid_is_harmless(client: httpx.Client) -> None:
    assert client.post("/abort_request", json={"rid": "nobody"}).status_code == 200
    answer = client.post("/generate", json={"input_ids": [1], "sampling_params":
                                            {"max_new_tokens": 2}})
    assert answer.json()["meta_info"]["finish_reason"]["type"] in ("length", "stop")


def test_the_chat_route_honours_the_rid(client: httpx.Client) -> None:
    answer = client.post("/v1/chat/completions", json={
        "model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
        "rid": "chat-rid-1"})
    assert answer.json()["id"] == "chat-rid-1"
