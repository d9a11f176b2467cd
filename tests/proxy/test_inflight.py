"""Requests in flight are stopped when nobody waits for them: a non-streamed request
whose client left, and every request of a session that ``DELETE /sessions/{id}``
removes. Each is aborted on its SGLang server (``/abort_request {rid}``) and never
sent again; what the client was told and what was recorded agree."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson
import pytest

from seedproxy import derive_seed
from tests.conftest import Fake
from tests.helpers.fake_sglang import tokens_for
from tests.helpers.waiting import wait_until


def open_request(proxy: str, path: str, body: dict[str, Any]) -> socket.socket:
    """Send a whole request on a raw connection and leave it waiting for the answer."""
    url = urlsplit(proxy)
    conn = socket.create_connection((url.hostname, url.port))
    raw = orjson.dumps(body)
    conn.sendall(f"POST {path} HTTP/1.1\r\nhost: {url.netloc}\r\ncontent-type: "
                 f"application/json\r\ncontent-length: {len(raw)}\r\n\r\n".encode() + raw)
    return conn


def interactions(proxy: str, session: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{proxy}/sessions/{session}/trajectory")
    return answer.json()["interactions"] if answer.status_code == 200 else []


GENERATE = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 8}}
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}


@pytest.mark.parametrize(("path", "body"), [("/generate", GENERATE),
                                            ("/v1/chat/completions", CHAT),
                                            ("/v1/messages", CHAT),
                                            ("/v1/responses", {"model": "m", "input": "hi",
                                                               "max_output_tokens": 8})])
def test_a_client_that_leaves_a_non_streamed_request_gets_it_aborted_and_recorded(
    path: str, body: dict[str, Any], fake: Fake, start_proxy: Callable[..., str]
) -> None:
    control = fake.switches.control
    control.hold_at = 2  # the server stops after two tokens until released
    proxy = start_proxy([fake.url])
    conn = open_request(proxy, f"/sessions/left-1{path}", body)
    wait_until(lambda: control.held == 1)
    conn.close()  # the client goes away before the answer
    rid = fake.received[-1]["rid"]
    wait_until(lambda: ("abort", {"rid": rid}) in control.calls)
    assert control.aborted == [rid]
    control.release.set()
    wait_until(lambda: len(interactions(proxy, "left-1")) == 1)
    record = interactions(proxy, "left-1")[0]
    assert (record["abandoned"], record["status"]) == (True, 499)
    if path == "/generate":  # what the server made before the abort is kept
        partial = tokens_for([1, 2, 3], derive_seed("left-1", 0), 1.0, 2)
        assert record["completion_token_ids"] == partial
        assert record["response"]["meta_info"]["finish_reason"]["type"] == "abort"
    served = httpx.post(f"{proxy}/sessions/left-1{path}", json=body, timeout=30)
    assert served.status_code == 200
    assert served.headers["x-seedproxy-request-index"] == "1"  # the left one kept index 0
    assert len(fake.received) == 2  # never sent again


def test_a_client_that_leaves_while_the_fleet_is_paused_is_recorded_and_never_sent(
    fake: Fake, start_proxy: Callable[..., str]
) -> None:
    proxy = start_proxy([fake.url])
    httpx.post(f"{proxy}/fleet/pause", json={"mode": "in_place"}).raise_for_status()
    conn = open_request(proxy, "/sessions/left-2/generate", GENERATE)
    wait_until(lambda: httpx.get(f"{proxy}/fleet").json()["waiting"] == 1)
    conn.close()
    wait_until(lambda: len(interactions(proxy, "left-2")) == 1)
    record = interactions(proxy, "left-2")[0]
    assert (record["abandoned"], record["status"]) == (True, 499)
    assert record["response"]["error"]["type"] == "client_closed"
    assert record["completion_token_ids"] == []
    assert httpx.get(f"{proxy}/fleet").json()["waiting"] == 0
    httpx.post(f"{proxy}/fleet/continue").raise_for_status()
    assert httpx.post(f"{proxy}/generate", json=GENERATE).status_code == 200
    assert [b["input_ids"] for b in fake.received] == [[1, 2, 3]]  # only the last one


def test_delete_session_aborts_its_requests_in_flight_and_no_one_elses(
    fake: Fake, start_proxy: Callable[..., str]
) -> None:
    control = fake.switches.control
    control.hold_at = 2
    proxy = start_proxy([fake.url])
    results: dict[str, Any] = {}

    def plain(session: str, prompt: list[int]) -> None:
        body = {"input_ids": prompt, "sampling_params": {"max_new_tokens": 8}}
        results[session] = httpx.post(f"{proxy}/sessions/{session}/generate", json=body,
                                       timeout=60)

    def streamed() -> None:
        body = {"input_ids": [7, 8], "sampling_params": {"max_new_tokens": 8}, "stream": True}
        with httpx.stream("POST", f"{proxy}/sessions/del-1/generate", json=body,
                          timeout=60) as response:
            results["stream"] = [line for line in response.iter_lines() if line]

    workers = [threading.Thread(target=plain, args=("del-1", [4, 5])),
               threading.Thread(target=streamed),
               threading.Thread(target=plain, args=("keep-1", [9]))]
    for worker in workers:
        worker.start()
    wait_until(lambda: control.held == 3)
    rids = {tuple(b["input_ids"]): b["rid"] for b in fake.received}
    assert httpx.delete(f"{proxy}/sessions/del-1").status_code == 204
    doomed = {rids[(4, 5)], rids[(7, 8)]}
    wait_until(lambda: set(control.aborted) == doomed)
    control.release.set()
    for worker in workers:
        worker.join(60)
    gone = results["del-1"]
    assert gone.status_code == 404
    assert gone.json()["error"]["type"] == "not_found_error"
    last = orjson.loads(results["stream"][-1][len("data: "):])  # told instead of [DONE]
    assert last["error"]["type"] == "not_found_error" and "del-1" in last["error"]["message"]
    assert httpx.get(f"{proxy}/sessions/del-1/trajectory").status_code == 404
    kept = results["keep-1"]
    assert kept.status_code == 200
    assert kept.json()["output_ids"] == tokens_for([9], derive_seed("keep-1", 0), 1.0, 8)
    assert set(control.aborted) == doomed  # keep-1 ran to its end
    assert interactions(proxy, "keep-1")[0]["status"] == 200


def test_a_deleted_sessions_request_held_by_a_pause_is_never_sent(
    fake: Fake, start_proxy: Callable[..., str]
) -> None:
    proxy = start_proxy([fake.url])
    httpx.post(f"{proxy}/fleet/pause", json={"mode": "abort"}).raise_for_status()
    results: list[httpx.Response] = []
    worker = threading.Thread(target=lambda: results.append(httpx.post(
        f"{proxy}/sessions/del-2/generate", json=GENERATE, timeout=60)))
    worker.start()
    wait_until(lambda: httpx.get(f"{proxy}/fleet").json()["waiting"] == 1)
    assert httpx.delete(f"{proxy}/sessions/del-2").status_code == 204
    httpx.post(f"{proxy}/fleet/continue").raise_for_status()
    worker.join(60)
    assert results[0].status_code == 404
    assert "was deleted" in results[0].json()["error"]["message"]
    assert fake.received == []


def test_a_client_that_leaves_while_its_resubmission_waits_for_continue_is_recorded(
    fake: Fake, start_proxy: Callable[..., str]
) -> None:
    """An abort pause cut the request; its resubmission waits at the paused gate when
    the client leaves: it is never sent, and the interaction is recorded abandoned."""
    control = fake.switches.control
    control.hold_at = 2
    proxy = start_proxy([fake.url])
    conn = open_request(proxy, "/sessions/left-3/generate", GENERATE)
    wait_until(lambda: control.held == 1)
    httpx.post(f"{proxy}/fleet/pause", json={"mode": "abort"}).raise_for_status()
    control.release.set()  # the aborted answer comes back; its resubmission is held
    wait_until(lambda: httpx.get(f"{proxy}/fleet").json()["waiting"] == 1)
    conn.close()
    rid = fake.received[-1]["rid"]
    wait_until(lambda: ("abort", {"rid": rid}) in control.calls)  # the client was noticed
    httpx.post(f"{proxy}/fleet/continue").raise_for_status()
    wait_until(lambda: len(interactions(proxy, "left-3")) == 1)
    record = interactions(proxy, "left-3")[0]
    assert (record["abandoned"], record["status"]) == (True, 499)
    assert record["response"]["error"]["type"] == "client_closed"
    assert len(fake.received) == 1  # the resubmission was never sent
