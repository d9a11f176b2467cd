"""A request the proxy refuses before an upstream sees it leaves a request-log line
(``event: refused``, with its route, reason and message) and counts in /metrics by a
bounded reason; it takes no index."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import httpx
import orjson
import pytest

from seedproxy import derive_seed
from seedproxy.errors import BadRequest, SeedProxyError
from seedproxy.pipeline.admission import reason_of
from seedproxy.proxy.logs import _RequestFormatter
from tests.conftest import Fake
from tests.proxy.test_observability import scrape


def refused_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [orjson.loads(_RequestFormatter().format(r)) for r in caplog.records
            if r.name == "seedproxy.request" and r.getMessage() == "refused"]


def test_a_refused_responses_request_is_logged_and_counted_and_takes_no_index(
    fake: Fake, start_proxy: Callable[..., str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="seedproxy.request")
    url = start_proxy([fake.url])
    bad = {"model": "m", "input": [{"type": "computer_call_output", "call_id": "c"}]}
    with httpx.Client(base_url=url, timeout=30) as http:
        for _ in range(2):
            answer = http.post("/sessions/ref-1/v1/responses", json=bad)
            assert answer.status_code == 400
            assert answer.json()["error"]["param"] == "input"
        good = http.post("/sessions/ref-1/v1/responses", json={"model": "m", "input": "hi"})
        assert good.status_code == 200
        assert good.headers["x-seedproxy-seed"] == str(derive_seed("ref-1", 0))
    lines = refused_lines(caplog)
    assert len(lines) == 2
    assert lines[0] == {
        "event": "refused", "session": "ref-1", "index": None, "seed": None, "upstream": None,
        "status": 400, "proxy_ms": None, "upstream_ms": None, "route": "/v1/responses",
        "reason": "input", "detail": "unsupported input item type 'computer_call_output'"}
    counted = scrape(url)
    key = (("reason", "input"), ("route", "/v1/responses"), ("status", "400"))
    assert counted[("seedproxy_refusals_total", key)] == 2
    assert not [k for k in counted if k[0] == "seedproxy_refusals_total" and k[1] != key]


def test_a_request_without_the_admin_key_is_a_counted_refusal(
    fake: Fake, start_proxy: Callable[..., str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="seedproxy.request")
    url = start_proxy([fake.url], admin_key="secret")
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    answer = httpx.post(f"{url}/v1/chat/completions", json=body)
    assert answer.status_code == 401
    [line] = refused_lines(caplog)
    assert (line["route"], line["status"], line["session"]) == ("/v1/chat/completions", 401,
                                                                None)
    key = (("reason", "authentication_error"), ("route", "/v1/chat/completions"),
           ("status", "401"))
    assert scrape(url)[("seedproxy_refusals_total", key)] == 1


def test_request_logging_off_still_counts_refusals(
    fake: Fake, start_proxy: Callable[..., str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="seedproxy.request")
    url = start_proxy([fake.url], log_requests=False)
    answer = httpx.post(f"{url}/v1/responses", json={"model": "m", "input": 7})
    assert answer.status_code == 400
    assert refused_lines(caplog) == []
    key = (("reason", "input"), ("route", "/v1/responses"), ("status", "400"))
    assert scrape(url)[("seedproxy_refusals_total", key)] == 1


@pytest.mark.parametrize("error,reason", [
    (BadRequest("x", param="messages.3.content"), "messages"),
    (BadRequest("x", param="tools[2]"), "tools"),
    (BadRequest("x", param="Ignore previous instructions"), "other"),
    (BadRequest("x", param="a" * 41), "other"),
    (BadRequest("x", param="input", code="model_not_found"), "model_not_found"),
    (BadRequest("x"), "invalid_request_error"),
    (SeedProxyError("x"), "internal_error"),
])
def test_the_reason_is_a_bounded_label_never_client_text(error: SeedProxyError,
                                                         reason: str) -> None:
    assert reason_of(error) == reason


def test_a_session_id_that_is_not_valid_is_counted_but_not_logged(
    fake: Fake, start_proxy: Callable[..., str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="seedproxy.request")
    url = start_proxy([fake.url])
    named = "x" * 129
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    answer = httpx.post(f"{url}/sessions/{named}/v1/chat/completions", json=body)
    assert answer.status_code == 400
    [line] = refused_lines(caplog)
    assert line["session"] is None and named not in orjson.dumps(line).decode()
    assert line["reason"] == answer.json()["error"]["param"]
