"""The openai SDK through seedproxy to the engine: ``response_format`` json_schema gives
valid JSON, and a session's seed makes it repeat exactly."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import httpx
import openai
import pytest

from seedproxy.engine import RunningEngine
from tests.engine.test_structured import SCHEMA, check_person

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
