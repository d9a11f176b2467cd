"""An upstream's ``usage`` the bridges cannot read is the upstream's fault: a 502 in the
route's protocol (Anthropic's on /v1/messages), recorded so, never a 500 or a dropped
connection; and admin bodies take booleans only as booleans."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.conftest import Fake

ASK = {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
BROKEN = [{"prompt_tokens": "many"}, {"prompt_tokens_details": "cached"},
          {"completion_tokens": 1.5}, {"prompt_tokens_details": {"cached_tokens": "x"}}]


def _last_record(http: httpx.Client, session: str) -> dict[str, Any]:
    interactions: list[dict[str, Any]] = http.get(
        f"/sessions/{session}/trajectory").json()["interactions"]
    return interactions[-1]


@pytest.mark.parametrize("patch", BROKEN)
def test_a_messages_answer_with_unreadable_usage_is_an_anthropic_502(
        patch: dict[str, Any], fake: Fake, http: httpx.Client) -> None:
    fake.switches.usage_patch = patch
    answer = http.post("/sessions/u1/v1/messages", json=ASK)
    assert answer.status_code == 502, answer.text
    body = answer.json()
    assert body["type"] == "error" and body["error"]["type"] == "api_error", body
    assert "usage" in body["error"]["message"]
    record = _last_record(http, "u1")
    assert record["status"] == 502 and record["response"] == body


@pytest.mark.parametrize("patch", BROKEN[:2])
def test_a_messages_stream_with_unreadable_usage_ends_in_anthropics_error_event(
        patch: dict[str, Any], fake: Fake, http: httpx.Client) -> None:
    fake.switches.usage_patch = patch
    with http.stream("POST", "/sessions/u2/v1/messages", json={**ASK, "stream": True}) as r:
        assert r.status_code == 200
        text = r.read().decode()
    events = [line.split(": ", 1)[1] for line in text.splitlines()
              if line.startswith("event: ")]
    assert events[-1] == "error" and "message_stop" not in events, events
    assert _last_record(http, "u2")["status"] == 502


@pytest.mark.parametrize(("path", "body"), [
    ("/trajectories/export", {"remove": "yes"}),
    ("/fleet/weight_version", {"version": "v2", "abort_all_requests": "yes"}),
    ("/fleet/weight_version", {"version": "v2", "abort_all_requests": 1}),
])
def test_admin_booleans_are_strict(path: str, body: dict[str, Any], fake: Fake,
                                   start_proxy: Callable[..., str]) -> None:
    proxy = start_proxy([fake.url])
    answer = httpx.post(proxy + path, json=body, timeout=30)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["type"] == "invalid_request_error"
