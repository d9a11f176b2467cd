"""Streaming gives the same tokens as non-streaming, pushed as they are produced."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.engine

MSG = [{"role": "user", "content": "Say something."}]


def sse(client: httpx.Client, path: str, body: dict[str, Any],
        headers: dict[str, str] | None = None) -> list[Any]:
    events = []
    with client.stream("POST", path, json=body, headers=headers or {}) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("data: "):
                data = line[len("data: "):]
                events.append(data if data == "[DONE]" else json.loads(data))
    assert events[-1] == "[DONE]"
    return events[:-1]


def test_generate_stream_is_cumulative_and_matches(client: httpx.Client) -> None:
    body = {"text": "Hello there", "return_logprob": True,
            "sampling_params": {"max_new_tokens": 12, "sampling_seed": 4}}
    full = client.post("/generate", json=body).json()
    chunks = sse(client, "/generate", {**body, "stream": True})
    assert len(chunks) == 12
    for i, ch in enumerate(chunks):
        assert ch["output_ids"] == full["output_ids"][: i + 1]
        assert full["text"].startswith(ch["text"])
    assert chunks[-1]["text"] == full["text"]
    assert chunks[-1]["meta_info"]["output_token_logprobs"] == \
        full["meta_info"]["output_token_logprobs"]
    assert chunks[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 12}


def test_chat_stream_matches_non_stream(client: httpx.Client) -> None:
    body = {"messages": MSG, "max_tokens": 10, "seed": 3, "logprobs": True}
    full = client.post("/v1/chat/completions",
                       json={**body, "return_token_ids": True}).json()
    hdr = {"x-sglext-return-input-ids": "1", "x-sglext-return-output-ids": "1"}
    events = sse(client, "/v1/chat/completions",
                 {**body, "stream": True, "stream_options": {"include_usage": True}}, hdr)
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events
                   if e["choices"])
    lp = [c["logprob"] for e in events if e["choices"] and e["choices"][0]["logprobs"]
          for c in e["choices"][0]["logprobs"]["content"]]
    choice = full["choices"][0]
    assert text == choice["message"]["content"]
    assert lp == [c["logprob"] for c in choice["logprobs"]["content"]]
    ext = [e["sglext"] for e in events if "sglext" in e]
    assert ext == [{"input_ids": choice["prompt_token_ids"],
                    "output_ids": [choice["response_token_ids"]]}]
    assert events[-1]["usage"]["completion_tokens"] == 10
    assert any(e["choices"] and e["choices"][0]["finish_reason"] == "length" for e in events)


def test_chat_openai_sdk_stream(oai: Any) -> None:
    kw = {"model": "x", "messages": MSG, "max_tokens": 8, "seed": 12}
    full = oai.chat.completions.create(**kw)
    parts = [c.choices[0].delta.content or "" for c in
             oai.chat.completions.create(stream=True, **kw) if c.choices]
    assert "".join(parts) == full.choices[0].message.content


def test_completions_stream_token_ids(client: httpx.Client) -> None:
    body = {"prompt": "Numbers:", "max_tokens": 9, "seed": 2, "return_token_ids": True}
    full = client.post("/v1/completions", json=body).json()["choices"][0]
    events = sse(client, "/v1/completions", {**body, "stream": True})
    ids = [t for e in events if e["choices"] for t in e["choices"][0]["token_ids"]]
    assert ids == full["token_ids"]
    assert events[0]["choices"][0]["prompt_token_ids"] == full["prompt_token_ids"]
    assert "".join(e["choices"][0]["text"] for e in events if e["choices"]) == full["text"]


def test_chat_stream_with_return_token_ids_is_400(client: httpx.Client) -> None:
    r = client.post("/v1/chat/completions",
                    json={"messages": MSG, "stream": True, "return_token_ids": True})
    assert r.status_code == 400
    assert r.json()["object"] == "error" and "streaming" in r.json()["message"]
