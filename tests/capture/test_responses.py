"""/v1/responses served through SGLang's chat route with the derived seed, driven by
the real openai SDK: ``responses.create`` and ``responses.stream`` both parse."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from seedproxy import derive_seed
from tests.conftest import Fake

TOOLS: list[Any] = [
    {
        "type": "function",
        "name": "search",
        "description": "look something up",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
    }
]


def sdk(proxy: str, session: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{proxy}/sessions/{session}/v1", api_key="x", max_retries=0)


def test_create_carries_the_seed_upstream_and_parses(
    proxy: str, fake: Fake, http: httpx.Client
) -> None:
    c = sdk(proxy, "r1")
    raw = c.responses.with_raw_response.create(
        model="m",
        input="hello",
        instructions="be brief",
        max_output_tokens=5,
        temperature=0.7,
        top_p=0.9,
    )
    response = raw.parse()
    sent = fake.received[0]
    assert sent["seed"] == derive_seed("r1", 0) == int(raw.headers["x-seedproxy-seed"])
    assert sent["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hello"},
    ]
    assert (sent["max_tokens"], sent["temperature"], sent["top_p"]) == (5, 0.7, 0.9)
    assert response.object == "response"
    assert len(response.output_text.split()) == 5
    assert response.usage is not None
    assert response.usage.output_tokens == 5
    assert response.usage.input_tokens == len("<system>be brief<user>hello<assistant>")
    assert "prompt_token_ids" not in raw.text and "\"logprobs\"" not in raw.text
    record = http.get("/sessions/r1/trajectory").json()["interactions"][0]
    assert record["endpoint"] == "/v1/responses"
    assert record["request"]["input"] == "hello"
    assert record["response"]["output"][0]["content"][0]["text"] == response.output_text
    assert len(record["completion_token_ids"]) == 5 and len(record["logprobs"]) == 5
    assert record["prompt_token_ids"]


def test_stream_matches_create_and_the_sdk_accumulates_it(
    proxy: str, fake: Fake, http: httpx.Client
) -> None:
    whole = sdk(proxy, "twin").responses.create(model="m", input="hi")
    http.post("/sessions", json={"session_id": "twin-s", "identity": "twin"})
    deltas = []
    with sdk(proxy, "twin-s").responses.stream(model="m", input="hi") as stream:
        for event in stream:
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
        final = stream.get_final_response()
    assert fake.received[1]["seed"] == fake.received[0]["seed"] == derive_seed("twin", 0)
    assert fake.received[1]["stream"] is True
    assert "".join(deltas) == final.output_text == whole.output_text
    assert final.usage is not None and final.usage.output_tokens == 8
    record = http.get("/sessions/twin-s/trajectory").json()["interactions"][0]
    assert record["response"]["output"][0]["content"][0]["text"] == whole.output_text
    assert len(record["completion_token_ids"]) == 8 and len(record["logprobs"]) == 8


@pytest.mark.parametrize("stream", [False, True])
def test_a_function_tool_round_trip(proxy: str, fake: Fake, stream: bool) -> None:
    c = sdk(proxy, f"tools-{stream}")
    history: list[Any] = [{"role": "user", "content": "find cats"}]
    if stream:
        with c.responses.stream(model="m", input=history, tools=TOOLS) as s:
            first = s.get_final_response()
    else:
        first = c.responses.create(model="m", input=history, tools=TOOLS)
    calls = [item for item in first.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "search"
    query = json.loads(calls[0].arguments)["query"]
    assert fake.received[0]["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "search",
                "description": "look something up",
                "parameters": TOOLS[0]["parameters"],
            },
        }
    ]
    history += [
        calls[0].model_dump(exclude_none=True),
        {"type": "function_call_output", "call_id": calls[0].call_id, "output": "3 cats"},
    ]
    second = c.responses.create(model="m", input=history, tools=TOOLS)
    assert second.output_text and not [i for i in second.output if i.type == "function_call"]
    sent = fake.received[1]["messages"]
    assert sent[1]["role"] == "assistant"
    assert sent[1]["tool_calls"][0]["id"] == calls[0].call_id
    assert json.loads(sent[1]["tool_calls"][0]["function"]["arguments"]) == {"query": query}
    assert sent[2] == {"role": "tool", "tool_call_id": calls[0].call_id, "content": "3 cats"}
    assert fake.received[1]["seed"] == derive_seed(f"tools-{stream}", 1)


def test_an_untranslatable_request_is_a_400_using_no_index(
    proxy: str, fake: Fake, http: httpx.Client
) -> None:
    with pytest.raises(openai.BadRequestError):
        sdk(proxy, "bad-r").responses.create(
            model="m", input=[{"type": "item_reference", "id": "rs_1"}])
    assert fake.received == []
    assert http.get("/sessions/bad-r").status_code == 404  # a 4xx creates no session


def test_a_hosted_tool_is_left_out_of_the_prompt_and_named_in_the_record(
    proxy: str, fake: Fake, http: httpx.Client
) -> None:
    fake.switches.stop_after = 3
    response = sdk(proxy, "hosted").responses.create(
        model="m", input="x", tools=[{"type": "web_search"}, {"type": "file_search",
                                                              "vector_store_ids": ["v"]}])
    assert response.status == "completed"
    assert "tools" not in fake.received[0]
    [turn] = http.get("/sessions/hosted/trajectory").json()["interactions"]
    assert turn["left_out_tools"] == ["web_search", "file_search"]
    assert [t["type"] for t in turn["response"]["tools"]] == ["web_search", "file_search"]


def test_logprobs_asked_for_come_back_in_the_output(proxy: str) -> None:
    response = sdk(proxy, "lp").responses.create(
        model="m", input="hi", include=["message.output_text.logprobs"], max_output_tokens=3
    )
    logprobs = response.output[0].content[0].logprobs  # type: ignore[union-attr]
    assert logprobs is not None and len(logprobs) == 3
