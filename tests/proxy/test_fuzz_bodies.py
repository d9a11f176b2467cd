"""Malformed requests, generated: wrong types, huge numbers, deep nesting, invalid
UTF-8, truncated JSON, oversized headers. The proxy never answers 500 from its own
code, every error it gives has OpenAI's shape, and the session's counter matches
what reached the upstream: each index taken has exactly one recorded interaction."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seedproxy.proxy import create_app
from seedproxy.settings import Settings
from tests.helpers.fake_sglang import Switches, create_fake_sglang
from tests.helpers.servers import ServerThread

ROUTES = ["/v1/chat/completions", "/v1/completions", "/v1/responses", "/generate"]
SESSION = "fuzz"
FUZZ = settings(
    max_examples=60, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

huge = st.sampled_from([2**63, 2**64, -(2**63) - 1, 10**30, 1e308, -1e308, 1e-320, 2**53 + 1])
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | huge
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
FIELDS = ["messages", "prompt", "input", "text", "input_ids", "n", "seed", "stream", "max_tokens",
          "temperature", "sampling_params", "logprobs", "tools", "stream_options", "model"]
bodies = st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=6)
valid_ish = st.fixed_dictionaries(
    {"model": st.just("m"), "messages": st.just([{"role": "user", "content": "hi"}])},
    optional={
        k: json_values for k in ["n", "seed", "stream", "max_tokens", "temperature", "logprobs"]
    },
)


class Target:
    def __init__(self) -> None:
        self.switches = Switches()
        self.fake = ServerThread(create_fake_sglang(self.switches)).start()
        app = create_app(Settings(upstream=[self.fake.url], max_body_bytes=256 * 1024))
        self.proxy = ServerThread(app).start()
        self.http = httpx.Client(base_url=self.proxy.url, timeout=30)

    def close(self) -> None:
        self.http.close()
        self.proxy.stop()
        self.fake.stop()


@pytest.fixture(scope="module")
def target() -> Iterator[Target]:
    t = Target()
    yield t
    t.close()


def check(answer: httpx.Response) -> None:
    """No proxy-made 500; errors in OpenAI's shape."""
    if answer.status_code < 400:
        return
    if answer.status_code == 400 and b"Invalid HTTP request" in answer.content:
        return  # the HTTP server refused a malformed request before the proxy saw it
    body = answer.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"message", "type", "param", "code"}, body
    assert isinstance(body["error"]["message"], str)
    assert not (answer.status_code == 500 and body["error"]["type"] == "internal_error"), body


def post(target: Target, route: str, content: bytes, **headers: str) -> httpx.Response:
    headers.setdefault("content-type", "application/json")
    return target.http.post(f"/sessions/{SESSION}{route}", content=content, headers=headers)


def counters_consistent(target: Target) -> None:
    state = target.http.get(f"/sessions/{SESSION}")
    if state.status_code == 404:
        return
    next_index = state.json()["next_index"]
    indices = [i["request_index"] for i in
               target.http.get(f"/sessions/{SESSION}/trajectory").json()["interactions"]]
    assert indices == list(range(next_index))
    assert len(target.switches.received) >= next_index


@FUZZ
@given(route=st.sampled_from(ROUTES), body=bodies | valid_ish)
def test_wrong_types_and_huge_numbers(target: Target, route: str, body: dict[str, Any]) -> None:
    check(post(target, route, json.dumps(body).encode()))
    counters_consistent(target)


@FUZZ
@given(
    route=st.sampled_from(ROUTES),
    kind=st.sampled_from("[{"),
    depth=st.sampled_from([200, 230, 240, 241, 242, 243, 250, 251, 1019, 1020, 1021])
    | st.integers(1, 3000),
)
def test_deep_nesting(target: Target, route: str, depth: int, kind: str) -> None:
    inner = ("[" * depth + "]" * depth) if kind == "[" else ('{"a":' * depth + "1" + "}" * depth)
    raw = b'{"model": "m", "messages": [{"role": "user", "content": ' + inner.encode() + b"}]}"
    check(post(target, route, raw))
    counters_consistent(target)


@FUZZ
@given(
    route=st.sampled_from(ROUTES), junk=st.binary(min_size=1, max_size=64), at=st.integers(0, 60)
)
def test_invalid_utf8_and_truncated_json(target: Target, route: str, junk: bytes, at: int) -> None:
    valid = orjson.dumps(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "hé"}],
            "prompt": "p",
            "input": "i",
            "text": "t",
        }
    )
    check(post(target, route, valid[:at]))
    check(post(target, route, valid[:at] + b"\xff\xfe" + junk + valid[at:]))
    counters_consistent(target)


@FUZZ
@given(
    name=st.sampled_from(
        ["x-request-index", "x-stainless-retry-count", "x-session-id", "authorization", "x-padding"]
    ),
    value=st.binary(max_size=64) | st.sampled_from([b"9" * 40, b"-1", b" 3 ", b"Bearer \xff"]),
)
def test_odd_header_values(target: Target, name: str, value: bytes) -> None:
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    try:
        answer = target.http.post(f"/sessions/{SESSION}/v1/chat/completions", content=body,
                                  headers={"content-type": "application/json", name: value})
    except httpx.LocalProtocolError:
        return  # not a legal header value: nothing was sent
    check(answer)
    counters_consistent(target)


@pytest.mark.parametrize("size", [8 * 1024, 64 * 1024, 1024 * 1024])
def test_oversized_headers_never_break_the_proxy(target: Target, size: int) -> None:
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    before = target.http.get(f"/sessions/{SESSION}").json()["next_index"] if target.http.get(
        f"/sessions/{SESSION}").status_code == 200 else 0
    try:
        answer = target.http.post(f"/sessions/{SESSION}/v1/chat/completions", content=body,
                                  headers={"content-type": "application/json", "x-big": "a" * size})
    except httpx.HTTPError:
        pass  # the server may drop a request whose headers it will not read
    else:
        assert answer.status_code < 500 or answer.status_code == 502, answer.text
        if answer.status_code >= 400 and answer.headers.get("content-type", "").startswith(
            "application/json"
        ):
            check(answer)
    fresh = httpx.post(f"{target.proxy.url}/sessions/{SESSION}/v1/chat/completions", content=body,
                       headers={"content-type": "application/json"}, timeout=30)
    assert fresh.status_code == 200
    assert int(fresh.headers["x-seedproxy-request-index"]) >= before
    counters_consistent(target)
