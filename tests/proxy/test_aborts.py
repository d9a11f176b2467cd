"""A client that leaves a stream gets its request aborted on the SGLang server that
runs it (``/abort_request`` with the request's ``rid``), and the interaction is recorded
as abandoned."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.conftest import Fake
from tests.helpers.waiting import wait_until


def leave_after_first_chunk(url: str, body: dict[str, Any]) -> None:
    with httpx.stream("POST", url, json=body, timeout=60) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                return  # the client goes away with the stream unfinished


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/generate", {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 8},
                       "stream": True}),
        ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}],
                                  "max_tokens": 8, "stream": True}),
    ],
)
def test_a_client_that_leaves_a_stream_gets_its_request_aborted_upstream(
    path: str, body: dict[str, Any], fake: Fake, start_proxy: Callable[..., str]
) -> None:
    control = fake.switches.control
    control.hold_at = 2  # the upstream stops mid-generation until released
    proxy = start_proxy([fake.url])
    leave_after_first_chunk(f"{proxy}/sessions/gone-1{path}", body)
    rid = fake.received[-1]["rid"]
    assert rid.startswith("seedproxy-")
    wait_until(lambda: ("abort", {"rid": rid}) in control.calls)
    assert control.aborted == [rid]
    control.release.set()
    record = httpx.get(f"{proxy}/sessions/gone-1/trajectory").json()["interactions"][0]
    assert record["abandoned"] is True and record["status"] == 499


def test_a_finished_stream_is_not_aborted(fake: Fake, start_proxy: Callable[..., str]) -> None:
    proxy = start_proxy([fake.url])
    body = {"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 3}, "stream": True}
    with httpx.stream("POST", f"{proxy}/sessions/done-1/generate", json=body) as response:
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    record = httpx.get(f"{proxy}/sessions/done-1/trajectory").json()["interactions"][0]
    assert record["abandoned"] is False
    assert [c for c in fake.switches.control.calls if c[0] == "abort"] == []


def test_a_clients_own_rid_is_kept(fake: Fake, start_proxy: Callable[..., str]) -> None:
    proxy = start_proxy([fake.url])
    body = {"input_ids": [1], "sampling_params": {"max_new_tokens": 2}, "rid": "mine-7"}
    assert httpx.post(f"{proxy}/sessions/own-1/generate", json=body).status_code == 200
    assert fake.received[-1]["rid"] == "mine-7"
