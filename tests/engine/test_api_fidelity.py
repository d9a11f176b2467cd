"""SGLang behaviours the engine now follows: context budget, echo logprobs, continuous
usage, cancelling abandoned requests, and 500 (not 400) for the engine's own failures."""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

import httpx
import pytest

from seedproxy.engine import RunningEngine
from seedproxy.engine.sampler import Sampler
from seedproxy.engine.state import EngineState

pytestmark = pytest.mark.engine

MSG = [{"role": "user", "content": "hi"}]


def engine_state(engine: RunningEngine) -> EngineState:
    state: EngineState = engine.server.config.app.state.engine  # type: ignore[attr-defined]
    return state


def sse(client: httpx.Client, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    with client.stream("POST", path, json={**body, "stream": True}) as r:
        assert r.status_code == 200
        return [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/chat/completions", {"messages": MSG, "max_tokens": 2040}),
    ("/v1/completions", {"prompt": [5] * 2000, "max_tokens": 48}),
    ("/generate", {"input_ids": [5] * 10, "sampling_params": {"max_new_tokens": 2038}}),
])
def test_max_tokens_beyond_the_context_is_400_not_clamped(client: httpx.Client, path: str,
                                                         body: dict[str, Any]) -> None:
    r = client.post(path, json=body)
    assert r.status_code == 400, r.text
    msg = r.json()["error"]["message"] if path == "/generate" else r.json()["message"]
    assert msg.startswith("Requested token count exceeds the model's maximum context length "
                          "of 2048 tokens.")


def test_max_tokens_within_the_context_is_served(client: httpx.Client) -> None:
    r = client.post("/generate", json={"input_ids": [5] * 10,
                                       "sampling_params": {"max_new_tokens": 2},
                                       })
    assert r.status_code == 200 and len(r.json()["output_ids"]) == 2


def test_echo_returns_prompt_logprobs_and_real_text_offsets(client: httpx.Client) -> None:
    body = {"prompt": "The cat sat", "max_tokens": 3, "logprobs": 2, "echo": True, "seed": 1}
    choice = client.post("/v1/completions", json=body).json()["choices"][0]
    lp = choice["logprobs"]
    native = client.post("/generate", json={
        "text": "The cat sat", "return_logprob": True, "logprob_start_len": 0,
        "sampling_params": {"max_new_tokens": 3, "sampling_seed": 1}}).json()["meta_info"]
    prompt_lps = [x[0] for x in native["input_token_logprobs"]]
    n_prompt = len(prompt_lps)
    assert lp["token_logprobs"][:n_prompt] == prompt_lps and prompt_lps[0] is None
    assert lp["token_logprobs"][n_prompt:] == [x[0] for x in native["output_token_logprobs"]]
    assert len(lp["tokens"]) == n_prompt + 3
    assert lp["top_logprobs"][0] is None and all(len(t) == 2 for t in lp["top_logprobs"][1:])
    text = choice["text"]
    assert text.startswith("The cat sat")
    for offset, token in zip(lp["text_offset"], lp["tokens"], strict=True):
        assert text[offset:offset + len(token)] == token
    # streamed: the same tokens, and offsets that continue across chunks
    chunks = sse(client, "/v1/completions", body)
    tokens = [t for c in chunks for t in c["choices"][0]["logprobs"]["tokens"]]
    offsets = [o for c in chunks for o in c["choices"][0]["logprobs"]["text_offset"]]
    assert tokens == lp["tokens"] and offsets == lp["text_offset"]


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/chat/completions", {"messages": MSG}),
    ("/v1/completions", {"prompt": "Once"}),
])
def test_continuous_usage_stats_puts_usage_in_every_chunk(client: httpx.Client, path: str,
                                                          body: dict[str, Any]) -> None:
    opts = {"include_usage": True, "continuous_usage_stats": True}
    chunks = sse(client, path, {**body, "max_tokens": 5, "stream_options": opts})
    with_choices = [c for c in chunks if c["choices"]]
    assert with_choices and all(c.get("usage") for c in with_choices)
    counts = [c["usage"]["completion_tokens"] for c in with_choices]
    assert counts == sorted(counts) and counts[-1] == 5
    final = chunks[-1]["usage"]
    assert final["completion_tokens"] == 5
    assert all(c["usage"]["prompt_tokens"] == final["prompt_tokens"] for c in with_choices)
    plain = sse(client, path, {**body, "max_tokens": 5, "stream_options": {
        "include_usage": True}})
    assert not any(c.get("usage") for c in plain if c["choices"])


def test_a_request_whose_client_left_is_cancelled(engine: RunningEngine,
                                                  client: httpx.Client) -> None:
    state = engine_state(engine)
    rid = f"abandoned-{time.monotonic_ns()}"
    # Keep the worker busy with a stream, so the abandoned request is still queued when
    # its client gives up: nothing here depends on how fast tokens come.
    blocker = httpx.Client(base_url=engine.url, timeout=60)
    gone = threading.Event()
    with blocker.stream("POST", "/generate", json={
            "text": "busy", "stream": True,
            "sampling_params": {"max_new_tokens": 1500, "ignore_eos": True}}) as stream:
        next(stream.iter_lines())  # the blocker is generating

        def abandon() -> None:
            with httpx.Client(base_url=engine.url, timeout=1.0) as short:
                try:
                    short.post("/generate", json={"text": "long", "rid": rid, "sampling_params": {
                        "max_new_tokens": 1500, "ignore_eos": True}})
                except httpx.TimeoutException:
                    gone.set()

        t = threading.Thread(target=abandon)
        t.start()
        t.join()
        assert gone.is_set()
    blocker.close()
    deadline = time.monotonic() + 120
    while state.jobs.find(rid) is None:
        assert time.monotonic() < deadline, "the abandoned job never ended"
        time.sleep(0.05)
    done = state.jobs.find(rid)
    assert done is not None and done.finish_type == "abort"
    assert done.completion_tokens < 1500


def test_an_engine_failure_is_a_500_with_a_log_line(client: httpx.Client,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("injected fault")

    monkeypatch.setattr(Sampler, "choose", broken)
    with caplog.at_level(logging.ERROR, logger="seedproxy.engine"):
        r = client.post("/v1/chat/completions", json={"messages": MSG, "max_tokens": 2})
        native = client.post("/generate", json={"text": "x"})
    assert r.status_code == 500
    body = r.json()
    assert body["type"] == "InternalServerError" and body["code"] == 500
    assert "injected fault" in body["message"]
    assert native.status_code == 500 and "injected fault" in native.json()["error"]["message"]
    assert any("injected fault" in rec.getMessage() or rec.exc_info for rec in caplog.records)
    monkeypatch.undo()
    assert client.post("/generate", json={"text": "x", "sampling_params": {
        "max_new_tokens": 1}}).status_code == 200


def test_a_bug_in_request_handling_is_a_500_not_a_400(client: httpx.Client,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    from seedproxy.engine import chat

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("injected")

    monkeypatch.setattr(chat, "render_messages", broken)
    with caplog.at_level(logging.ERROR, logger="seedproxy.engine"):
        r = client.post("/v1/chat/completions", json={"messages": MSG})
    assert r.status_code == 500 and r.json()["type"] == "InternalServerError"
    assert any(rec.exc_info for rec in caplog.records)
    monkeypatch.undo()  # a bad request is still a 400
    assert client.post("/v1/chat/completions", json={"messages": "x"}).status_code == 400


def test_a_null_max_new_tokens_runs_to_the_context_and_an_absent_one_stops_at_128(
        client: httpx.Client) -> None:
    """SGLang: absent is 128; null is "up to the context window", what its chat routes
    send when no max_tokens was given (token-in-token-out sends the same)."""
    prompt = [5] * 1900  # the tiny model's context is 2048
    params = {"ignore_eos": True}
    absent = client.post("/generate", json={"input_ids": prompt, "sampling_params": params})
    null = client.post("/generate", json={"input_ids": prompt,
                                          "sampling_params": {**params, "max_new_tokens": None}})
    assert absent.json()["meta_info"]["completion_tokens"] == 128
    assert null.json()["meta_info"]["completion_tokens"] == 2048 - 1900
