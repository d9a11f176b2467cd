"""The openai SDK through seedproxy to the engine: ``response_format`` json_schema gives
valid JSON, and a session's seed makes it repeat exactly."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest

from seedproxy.engine import RunningEngine
from tests.engine.test_structured import SCHEMA, check_person, fuel_request

pytestmark = pytest.mark.engine


@pytest.fixture
def admin(engine: RunningEngine, start_proxy: Callable[..., str]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=start_proxy([engine.url]), timeout=60) as client:
        yield client


def ask(admin: httpx.Client, identity: str) -> str:
    made = admin.post("/sessions", json={"identity": identity}).json()["sessions"][0]
    with openai.OpenAI(base_url=made["base_url"], api_key="x", max_retries=0,
                       timeout=120) as c:
        reply = c.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Describe a person."}],
            max_tokens=60, response_format={
                "type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}})
    return reply.choices[0].message.content or ""


def test_response_format_json_schema_through_seedproxy_is_valid_and_replays(
        admin: httpx.Client) -> None:
    first, replay = ask(admin, "json-a"), ask(admin, "json-a")
    check_person(first)
    assert replay == first
    check_person(ask(admin, "json-b"))
    assert isinstance(json.loads(first), dict)


def test_a_grammar_out_of_lexer_fuel_is_the_clients_400_and_recorded_as_one(
        admin: httpx.Client) -> None:
    body, field = fuel_request("/v1/chat/completions", 20)
    made = admin.post("/sessions", json={"identity": "fuel"}).json()["sessions"][0]
    with openai.OpenAI(base_url=made["base_url"], api_key="x", max_retries=0,
                       timeout=120) as c, pytest.raises(openai.BadRequestError) as err:
        c.chat.completions.create(model="m", **body)
    shown: Any = err.value.body
    assert err.value.status_code == 400 and shown["param"] == field, shown
    assert "fuel exhausted" in shown["message"]
    turn = admin.get("/sessions/fuel/trajectory").json()["interactions"][0]
    assert turn["status"] == 400 and turn["completion_token_ids"] == [], turn
    assert turn["response"] == {"error": shown}  # recorded as the client was told
