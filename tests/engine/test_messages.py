"""The anthropic SDK -> seedproxy /v1/messages -> the embedded engine (tiny model):
seeded, replayable, streamed, with a tool_result round trip and count_tokens."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import httpx
import pytest

from seedproxy import derive_seed
from seedproxy.engine import RunningEngine
from seedproxy.engine.testing import tiny_model
from seedproxy.engine.tokens import prompt_counter

ASK: list[Any] = [{"role": "user", "content": "Write a short poem about the sea."}]
TOOLS: list[Any] = [
    {
        "name": "Bash",
        "description": "run a command",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
    }
]


@pytest.fixture
def proxy(engine: RunningEngine, start_proxy: Callable[..., str]) -> str:
    return start_proxy([engine.url], _app={"prompt_counter": prompt_counter(tiny_model())})


@pytest.fixture
def admin(proxy: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=proxy, timeout=60) as client:
        yield client


def base_url(admin: httpx.Client, identity: str) -> str:
    made = admin.post("/sessions", json={"identity": identity}).json()["sessions"][0]
    return str(made["base_url"]).removesuffix("/v1")


def test_create_stream_and_a_rerun_give_identical_blocks(admin: httpx.Client) -> None:
    def run() -> tuple[Any, Any]:
        client = anthropic.Anthropic(base_url=base_url(admin, "sea"), api_key="x", max_retries=0)
        plain = client.messages.create(model="m", max_tokens=12, messages=ASK)
        with client.messages.stream(model="m", max_tokens=12, messages=ASK) as stream:
            streamed = stream.get_final_message()
        return plain, streamed

    (plain, streamed), (plain_again, streamed_again) = run(), run()
    assert plain.content and plain.content[0].type == "text"
    assert plain_again.content == plain.content and streamed_again.content == streamed.content
    assert plain.usage.output_tokens == 12 or plain.stop_reason == "end_turn"
    trajectory = admin.get("/sessions/sea-1/trajectory").json()["interactions"]
    assert [i["seed"] for i in trajectory] == [derive_seed("sea", 0), derive_seed("sea", 1)]
    assert trajectory[0]["completion_token_ids"] and trajectory[1]["completion_token_ids"]
    assert (
        trajectory[1]["response"]["content"]
        == streamed.model_dump(mode="json")["content"]
    )


def test_async_tool_result_round_trip_and_count_tokens(admin: httpx.Client) -> None:
    async def run() -> tuple[Any, Any]:
        client = anthropic.AsyncAnthropic(
            base_url=base_url(admin, "tools"), api_key="x", max_retries=0
        )
        history: list[Any] = [
            *ASK,
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "Bash",
                        "input": {"command": "ls"},
                    }
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": "poem.txt"}],
                    }
                ],
            },
        ]
        answer = await client.messages.create(
            model="m", max_tokens=8, tools=TOOLS, messages=history
        )
        counted = await client.messages.count_tokens(model="m", tools=TOOLS, messages=history)
        await client.close()
        return answer, counted

    answer, counted = asyncio.run(run())
    assert answer.content and answer.stop_reason in ("max_tokens", "end_turn")
    assert counted.input_tokens == answer.usage.input_tokens > 0
    record = admin.get("/sessions/tools/trajectory").json()["interactions"]
    assert len(record) == 1 and record[0]["seed"] == derive_seed("tools", 0)
    assert len(record[0]["prompt_token_ids"]) == counted.input_tokens
