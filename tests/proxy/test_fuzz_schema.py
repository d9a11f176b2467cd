"""Schemathesis against the proxy's own OpenAPI schema (FastAPI's /openapi.json),
over real HTTP: no 500 from the proxy's own code, every error in OpenAI's shape
(Anthropic's on /v1/messages),
and every session's counter matches its recorded interactions afterwards."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from seedproxy.proxy import create_app
from seedproxy.sessions import MemoryStore
from seedproxy.settings import Settings
from tests.helpers.fake_sglang import Switches, create_fake_sglang
from tests.helpers.servers import ServerThread


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, MemoryStore]]:
    store = MemoryStore()
    with ServerThread(create_fake_sglang(Switches())) as fake:
        app = create_app(Settings(upstream=[fake.url], max_body_bytes=64 * 1024), store=store)
        with ServerThread(app) as proxy:
            yield proxy.url, store


@pytest.fixture(scope="module")
def proxy_url(served: tuple[str, MemoryStore]) -> str:
    return served[0]


SETTINGS = settings(max_examples=25, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))


# SGLang's own server routes pass the server's answer on as it came (SGLang's error
# shape, not OpenAI's); what they must not do is fail in the proxy's own code.
SGLANG_ROUTES = {"/health", "/health_generate", "/get_model_info", "/get_server_info",
                 "/tokenize", "/v1/tokenize", "/detokenize"}


def check(response: schemathesis.Response, anthropic: bool = False,
          sglang: bool = False) -> None:
    if response.status_code < 400:
        return
    if sglang:
        assert response.status_code != 500 or "internal_error" not in response.text
        return
    body = response.json()
    if anthropic:  # /v1/messages answers in Anthropic's error shape
        assert body["type"] == "error" and set(body["error"]) == {"type", "message"}, body
        assert response.status_code != 500, body
        return
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"message", "type", "param", "code"}, body
    assert not (response.status_code == 500 and body["error"]["type"] == "internal_error"), body


def test_no_proxy_500_and_openai_shaped_errors(proxy_url: str) -> None:
    # Driven by hand: schemathesis' pytest plugin does not run under pytest 9.
    schema = schemathesis.openapi.from_url(f"{proxy_url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 15  # OpenAI routes (twice) and the admin routes

    for operation in operations:
        @SETTINGS
        @given(case=operation.as_strategy())
        def run(case: schemathesis.Case) -> None:
            # export and trajectory long-poll by design: keep their waits short
            if isinstance(case.body, dict) and isinstance(case.body.get("timeout_s"), int | float):
                case.body["timeout_s"] = min(case.body["timeout_s"], 0.1)
            if case.query and "timeout_s" in case.query:
                case.query["timeout_s"] = 0.1
            # run() is called within this iteration, so it sees this operation
            path = operation.path  # noqa: B023
            check(case.call(timeout=30), anthropic="/v1/messages" in path,
                  sglang=path in SGLANG_ROUTES)

        run()


def test_session_counters_stay_consistent_after_fuzzing(served: tuple[str, MemoryStore]) -> None:
    """Runs after the fuzz cases (same module): in every session the fuzzer reached,
    each index taken has exactly one recorded interaction, and exports still work.
    (Schema-random bodies rarely reach the upstream; test_fuzz_bodies covers that.)"""
    url, store = served

    async def audit() -> int:
        records = await store.list()
        for record in records:
            indices = [i.request_index for i in await store.interactions(record.session_id)]
            assert indices == list(range(record.next_index)), record.session_id
        return len(records)

    assert asyncio.run(audit()) > 0
    with httpx.Client(base_url=url, timeout=30) as http:
        assert isinstance(http.post("/trajectories/export", json={}).json()["trajectories"], list)


def test_every_schema_reference_resolves(proxy_url: str) -> None:
    """A body documented by hand (``documented``) with a nested model once pointed at
    ``#/$defs/...``, which an OpenAPI document does not have: clients and the fuzzer
    then saw no body schema at all for POST /sessions."""
    document = httpx.get(f"{proxy_url}/openapi.json", timeout=30).json()

    def refs(node: object) -> Iterator[str]:
        if isinstance(node, dict):
            if isinstance(node.get("$ref"), str):
                yield node["$ref"]
            for value in node.values():
                yield from refs(value)
        elif isinstance(node, list):
            for value in node:
                yield from refs(value)

    found = list(refs(document))
    for ref in found:
        assert ref.startswith("#/"), ref
        target: object = document
        for part in ref[2:].split("/"):
            assert isinstance(target, dict) and part in target, ref
            target = target[part]
    body = document["paths"]["/sessions"]["post"]["requestBody"]["content"]
    assert "fork" in body["application/json"]["schema"]["properties"]
