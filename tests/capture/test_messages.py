"""Anthropic's /v1/messages through seedproxy to the fake SGLang, driven by the official
anthropic SDK: seeded, translated to chat, recorded, and answered in Anthropic's shapes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import anthropic
import httpx
import pytest

from seedproxy import derive_seed
from tests.conftest import Fake

TOOLS: list[Any] = [
    {
        "name": "search",
        "description": "look something up",
        "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}},
    }
]


def sdk(proxy: str, session: str, **kw: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=f"{proxy}/sessions/{session}", api_key="x", max_retries=0, **kw
    )


def record(http: httpx.Client, session: str, k: int = 0) -> dict[str, Any]:
    interactions: list[dict[str, Any]] = http.get(f"/sessions/{session}/trajectory").json()[
        "interactions"
    ]
    return interactions[k]


def test_create_is_seeded_translated_and_recorded(
    proxy: str, fake: Fake, http: httpx.Client
) -> None:
    raw = sdk(proxy, "m1").messages.with_raw_response.create(
        model="m",
        max_tokens=5,
        stop_sequences=["zzz"],
        extra_body={"temperature": 0.7, "top_p": 0.9, "top_k": 20},
        system=[{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
        messages=[{"role": "user", "content": [{"type": "text", "text": "hello"}]}],
    )
    message = raw.parse()
    sent = fake.received[0]
    assert sent["seed"] == derive_seed("m1", 0) == int(raw.headers["x-seedproxy-seed"])
    assert sent["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hello"},
    ]
    assert (sent["max_tokens"], sent["temperature"], sent["top_p"], sent["top_k"]) == (
        5,
        0.7,
        0.9,
        20,
    )
    assert sent["stop"] == ["zzz"]
    assert message.type == "message" and message.role == "assistant"
    assert message.stop_reason == "max_tokens" and message.model == "m"
    assert [b.type for b in message.content] == ["text"]
    text = message.content[0].text  # type: ignore[union-attr]
    assert len(text.split()) == 5
    assert message.usage.output_tokens == 5
    assert message.usage.input_tokens == len("<system>be brief<user>hello<assistant>")
    assert "logprob" not in raw.http_response.text and "token_ids" not in raw.http_response.text
    rec = record(http, "m1")
    assert rec["endpoint"] == "/v1/messages" and rec["seed"] == derive_seed("m1", 0)
    assert rec["request"]["system"][0]["text"] == "be brief"
    assert rec["response"]["content"] == [{"type": "text", "text": text, "citations": None}]
    assert rec["response"]["id"] == message.id
    assert len(rec["completion_token_ids"]) == 5 and len(rec["logprobs"]) == 5


def test_async_client_and_stream_give_the_same_blocks_as_a_rerun(
    proxy: str, fake: Fake, http: httpx.Client
) -> None:
    fake.switches.reasoning = True

    async def run(identity: str) -> tuple[Any, list[str]]:
        made = http.post("/sessions", json={"identity": identity}).json()["sessions"][0]
        base = made["base_url"].removesuffix("/v1")  # the anthropic SDK adds /v1 itself
        client = anthropic.AsyncAnthropic(base_url=base, api_key="x", max_retries=0)
        kinds: list[str] = []
        async with client.messages.stream(
            model="m",
            max_tokens=6,
            thinking={"type": "enabled", "budget_tokens": 1024},
            messages=[{"role": "user", "content": "think, then say"}],
        ) as stream:
            async for event in stream:
                kinds.append(event.type)
            final = await stream.get_final_message()
        plain = await client.messages.create(
            model="m", max_tokens=6, messages=[{"role": "user", "content": "again"}]
        )
        await client.close()
        return (final, plain), kinds

    (first, kinds), (again, _) = asyncio.run(run("s1")), asyncio.run(run("s1"))
    final, plain = first
    assert [b.type for b in final.content] == ["thinking", "text"]
    thinking, text = final.content[0].thinking, final.content[1].text  # type: ignore[union-attr]
    assert thinking == " ".join(reversed(text.split()))
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "content_block_start" in kinds and "message_delta" in kinds
    assert final.stop_reason == "max_tokens" and final.usage.output_tokens == 6
    assert [b.type for b in plain.content] == ["thinking", "text"]
    # the rerun (a fresh session "s1-1" of the same identity) gives identical blocks
    assert again[0].content == final.content and again[1].content == plain.content
    assert again[0].id == final.id
    rec = record(http, "s1")
    assert rec["response"]["content"] == final.model_dump(mode="json")["content"]
    assert rec["seed"] == derive_seed("s1", 0) and record(http, "s1-1")["seed"] == rec["seed"]


def test_tool_use_then_tool_result_round_trip(proxy: str, fake: Fake, http: httpx.Client) -> None:
    client = sdk(proxy, "t1")
    ask: list[Any] = [{"role": "user", "content": "find the sea"}]
    first = client.messages.create(model="m", max_tokens=4, tools=TOOLS, messages=ask)
    assert first.stop_reason == "tool_use"
    use = first.content[-1]
    assert use.type == "tool_use" and use.name == "search" and use.id.startswith("toolu_")
    assert isinstance(use.input, dict) and set(use.input) == {"query"}
    follow = [
        *ask,
        {"role": "assistant", "content": first.content},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "salt water"}],
        },
    ]
    with client.messages.stream(model="m", max_tokens=4, tools=TOOLS, messages=follow) as stream:
        second = stream.get_final_message()
    assert second.stop_reason == "max_tokens" and second.content[0].type == "text"
    sent = fake.received[1]["messages"]
    assert sent[1]["tool_calls"][0]["id"] == use.id
    assert sent[1]["tool_calls"][0]["function"]["name"] == "search"
    assert sent[2] == {"role": "tool", "tool_call_id": use.id, "content": "salt water"}
    assert [record(http, "t1", k)["seed"] for k in (0, 1)] == [derive_seed("t1", k) for k in (0, 1)]
    # the streamed tool call parses into the same input as the non-streamed one
    with client.messages.stream(model="m", max_tokens=4, tools=TOOLS, messages=ask) as stream:
        streamed = stream.get_final_message()
    assert streamed.content[-1].type == "tool_use" and streamed.stop_reason == "tool_use"
    assert streamed.content[-1].input == {"query": streamed.content[-1].input["query"]}  # type: ignore[union-attr]


def test_what_claude_code_sends_is_accepted(proxy: str, fake: Fake, http: httpx.Client) -> None:
    assert http.head("/").status_code == 200
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 32000,
        "stream": True,
        "system": [
            {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}
        ],
        "messages": [
            {"role": "system", "content": "a reminder"},
            {
                "role": "user",
                "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}],
            },
        ],
        "thinking": {"type": "adaptive"},
        "output_config": {"effort": "high"},
        "context_management": {"edits": []},
        "metadata": {"user_id": "u"},
    }
    headers = {
        "anthropic-version": "2023-06-01",
        "anthropic-beta": "claude-code-20250219",
        "x-stainless-retry-count": "0",
        "x-api-key": "k",
        "x-session-id": "cc",
    }
    with http.stream("POST", "/v1/messages?beta=true", json=body, headers=headers) as r:
        assert r.status_code == 200, r.read()
        text = r.read().decode()
    assert text.startswith("event: message_start\n") and "event: message_stop" in text
    assert fake.received[0]["messages"][:2] == [
        {"role": "system", "content": "You are Claude Code."},
        {"role": "system", "content": "a reminder"},
    ]
    assert record(http, "cc")["seed"] == derive_seed("cc", 0)


def test_a_retry_reuses_the_index_and_replaces_the_record(proxy: str, http: httpx.Client) -> None:
    body = {"model": "m", "max_tokens": 3, "messages": [{"role": "user", "content": "x"}]}
    first = http.post("/sessions/r/v1/messages", json=body)
    again = http.post(
        "/sessions/r/v1/messages", json=body, headers={"x-stainless-retry-count": "1"}
    )
    assert (
        first.headers["x-seedproxy-request-index"]
        == again.headers["x-seedproxy-request-index"]
        == "0"
    )
    assert first.json()["content"] == again.json()["content"]
    assert len(http.get("/sessions/r/trajectory").json()["interactions"]) == 1


def test_errors_come_in_anthropics_shape_and_use_no_index(proxy: str, http: httpx.Client) -> None:
    bad_json = http.post(
        "/sessions/e/v1/messages", content=b"{nope", headers={"content-type": "application/json"}
    )
    assert bad_json.status_code == 400
    assert bad_json.json()["type"] == "error"
    assert bad_json.json()["error"]["type"] == "invalid_request_error"
    with pytest.raises(anthropic.BadRequestError) as missing:
        sdk(proxy, "e").messages.create(
            model="m", max_tokens=0, messages=[{"role": "user", "content": "x"}]
        )
    assert "max_tokens" in missing.value.message
    with pytest.raises(anthropic.BadRequestError):
        sdk(proxy, "e").messages.create(
            model="m",
            max_tokens=3,
            messages=[{"role": "user", "content": [{"type": "document", "source": {}}]}],
        )  # type: ignore[list-item]
    two = http.post(
        "/sessions/e/v1/messages",
        json={
            "model": "m",
            "max_tokens": 3,
            "n": 2,
            "messages": [{"role": "user", "content": "x"}],
        },
    )
    assert two.status_code == 400 and two.json()["error"]["type"] == "invalid_request_error"
    assert http.get("/sessions/e").status_code == 404  # nothing forwarded: no session, no index
    with pytest.raises(anthropic.NotFoundError) as counting:
        sdk(proxy, "e").messages.count_tokens(
            model="m", messages=[{"role": "user", "content": "x"}]
        )
    assert "tokenizer" in counting.value.message


def test_upstream_errors_are_reshaped_and_recorded(
    proxy: str, fake: Fake, http: httpx.Client
) -> None:
    fake.switches.fail_next, fake.switches.fail_status = 1, 400
    with pytest.raises(anthropic.BadRequestError) as caught:
        sdk(proxy, "u").messages.create(
            model="m", max_tokens=3, messages=[{"role": "user", "content": "x"}]
        )
    assert caught.value.body == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "injected failure"},
    }
    assert caught.value.response.headers["x-seedproxy-request-index"] == "0"
    assert record(http, "u")["status"] == 400


def test_keys_body_limit_and_auth_in_anthropics_shape(
    fake: Fake, start_proxy: Callable[..., str]
) -> None:
    url = start_proxy([fake.url], admin_key="admin", max_body_bytes=2048)
    with httpx.Client(base_url=url, headers={"authorization": "Bearer admin"}) as admin:
        made = admin.post("/sessions", json={"identity": "k"}).json()["sessions"][0]
        other = admin.post("/sessions", json={"identity": "o"}).json()["sessions"][0]
    ask: Any = [{"role": "user", "content": "x"}]
    by_x_api_key = anthropic.Anthropic(base_url=url, api_key=made["api_key"], max_retries=0)
    raw = by_x_api_key.messages.with_raw_response.create(model="m", max_tokens=3, messages=ask)
    assert raw.headers["x-seedproxy-session"] == "k"
    assert raw.headers["x-seedproxy-seed"] == str(derive_seed("k", 0))
    with pytest.raises(anthropic.AuthenticationError) as unknown:
        anthropic.Anthropic(base_url=url, api_key="wrong", max_retries=0).messages.create(
            model="m", max_tokens=3, messages=ask
        )
    assert unknown.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    with pytest.raises(anthropic.PermissionDeniedError):
        anthropic.Anthropic(
            base_url=f"{url}/sessions/k", api_key=other["api_key"], max_retries=0
        ).messages.create(model="m", max_tokens=3, messages=ask)
    with pytest.raises(anthropic.APIStatusError) as large:
        by_x_api_key.messages.create(
            model="m", max_tokens=3, messages=[{"role": "user", "content": "y" * 4096}]
        )
    assert large.value.status_code == 413
    assert large.value.body["error"]["type"] == "request_too_large"  # type: ignore[index]


def test_a_client_that_leaves_mid_stream_is_recorded_as_abandoned(
    proxy: str, fake: Fake, http: httpx.Client
) -> None:
    fake.switches.token_delay_s = 0.02
    body = {
        "model": "m",
        "max_tokens": 200,
        "stream": True,
        "messages": [{"role": "user", "content": "a long one"}],
    }
    with http.stream("POST", "/sessions/gone/v1/messages", json=body) as r:
        for line in r.iter_lines():
            if line.startswith("event: content_block_delta"):
                break
    for _ in range(500):  # until the proxy has noticed and recorded (bounded wait)
        interactions = http.get("/sessions/gone/trajectory").json()["interactions"]
        if interactions:
            break
        time.sleep(0.01)
    assert interactions[0]["status"] == 499
    partial = interactions[0]["response"]
    assert partial["stop_reason"] is None and partial["content"][0]["type"] == "text"
    assert 0 < len(partial["content"][0]["text"].split()) < 200


def test_an_upstream_that_breaks_off_a_stream_gives_an_error_event(
    proxy: str, fake: Fake, http: httpx.Client
) -> None:
    fake.switches.break_stream_after = 2
    body = {
        "model": "m",
        "max_tokens": 6,
        "stream": True,
        "messages": [{"role": "user", "content": "x"}],
    }
    text = http.post("/sessions/broken/v1/messages", json=body).text
    assert "event: error" in text and '"type":"api_error"' in text
    assert "message_stop" not in text
    record = http.get("/sessions/broken/trajectory").json()["interactions"][0]
    assert record["status"] == 502
