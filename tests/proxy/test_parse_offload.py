"""Large bodies are parsed in a worker process (``pipeline/offload.py``), with the
same results as the event loop's parse.

Two proxies in front of the same fake SGLang differ only in ``offload_parse_bytes``:
``None`` (every body parsed in the loop) and 0 (every body offloaded). The same
rollout gives byte-identical answers, records and exports on both, and the same bad
bodies the same status and error. Through the workers' test seam (a pair of FIFOs,
``tests/helpers/parse_hold.py``) a test holds a worker inside a parse: ``/healthz``
answers meanwhile, a killed worker is a 503 in the route's error shape and the next
body is parsed by a new one, and a body past the queue bound is a 429.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import time
from array import array
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from seedproxy.dialects import Endpoint
from seedproxy.pipeline.parse_jobs import Invalid, Packed, read_answer, read_body, unpacked
from seedproxy.pipeline.request import decode_body
from seedproxy.sessions.token_ids import TokenIds
from tests.conftest import Fake
from tests.helpers.parse_hold import ParseHold
from tests.helpers.procs import gone
from tests.helpers.waiting import wait_until
from tests.proxy.test_nesting import nested

PAD = "x" * 2048
"""Makes a body larger than the 1 KiB threshold the held proxies use."""


def offloaded(url: str) -> int:
    metrics = httpx.get(f"{url}/metrics").text
    found = re.search(r"^seedproxy_offloaded_parses_total (\S+)$", metrics, re.M)
    assert found is not None
    return int(float(found.group(1)))


def rollout(url: str) -> list[bytes]:
    """Chat turns (echoed prompts of thousands of ids), a /generate and a completions
    request in one session; every answer and the exports as bytes."""
    out = []
    messages: list[Any] = [{"role": "system", "content": "Be brief. " * 150}]
    with httpx.Client(base_url=f"{url}/sessions/big", timeout=120) as http:
        for turn in range(4):
            messages.append({"role": "user", "content": f"step {turn} " + "word " * 200 * turn})
            extra = {"return_prompt_token_ids": True, "return_token_ids": True} if turn == 3 else {}
            answer = http.post("/v1/chat/completions",
                               json={"model": "m", "messages": messages, "max_tokens": 4,
                                     "logprobs": turn == 3, **extra})
            assert answer.status_code == 200, answer.text
            out.append(answer.content)
            messages.append(answer.json()["choices"][0]["message"])
        for path, body in (
            ("/generate", {"input_ids": [(i * 37) % 5000 for i in range(700)],
                           "sampling_params": {"max_new_tokens": 4}, "return_logprob": True}),
            ("/v1/completions", {"model": "m", "prompt": list(range(3, 600)), "max_tokens": 4,
                                 "return_token_ids": True}),
        ):
            answer = http.post(path, json=body)
            assert answer.status_code == 200, answer.text
            out.append(answer.content)
        out.append(http.get("/trajectory").content)
        out.append(http.get("/trajectory", params={"style": "concat"}).content)
    return out


def test_the_worker_path_gives_what_the_loop_gives(
        fake: Fake, start_proxy: Callable[..., str]) -> None:
    fake.switches.chars_per_token = 2
    in_loop = start_proxy([fake.url], offload_parse_bytes=None)
    first = rollout(in_loop)
    worker = start_proxy([fake.url], offload_parse_bytes=0)
    second = rollout(worker)
    assert offloaded(in_loop) == 0
    # 4 chat turns and 2 more requests: each body and each answer once.
    assert offloaded(worker) == 12
    assert [timeless(b) for b in second] == [timeless(b) for b in first]
    records = orjson.loads(first[-2])["interactions"]
    sent = [b for b in fake.received if "messages" in b]
    assert len(records) == 6 and len(records[0]["prompt_token_ids"]) > 700
    assert records[0]["prompt_token_ids"] == fake_prompt(sent[0]["messages"], 2)
    assert records[4]["prompt_token_ids"] == [(i * 37) % 5000 for i in range(700)]


def timeless(content: bytes) -> bytes:
    """``content`` without the clock's values (the fake's ``created``, the record's
    times), which two runs cannot share."""
    return _TIMES.sub(rb'"\1":0', content)


_TIMES = re.compile(rb'"(created|created_at|updated_at|ended_at|started_at|latency_s|'
                    rb'upstream_latency_s|overhead_s|latency_ms)":[0-9.e+-]+')


def fake_prompt(messages: list[Any], chars_per_token: int) -> list[int]:
    from tests.helpers.fake_sglang import chat_prompt, tokenize
    return tokenize(chat_prompt(messages))[::chars_per_token]


BAD_BODIES: list[tuple[str, bytes]] = [
    ("/v1/chat/completions", b'{"model": "m", "messages": [' + PAD.encode()),
    ("/v1/chat/completions", b"[" + b"1," * 1500 + b"1]"),
    ("/v1/chat/completions", orjson.dumps({"model": "m", "messages": [], "pad": PAD})),
    ("/v1/chat/completions", orjson.dumps({"model": "m", "messages": [PAD]})),
    ("/v1/chat/completions",
     b'{"model": "m", "pad": "' + PAD.encode() + b'", "messages": [{"role": "user", "x": '
     + nested(100).encode() + b"}]}"),
    ("/v1/chat/completions", orjson.dumps({"model": "m", "messages": [{"role": "user",
                                           "content": PAD}], "stream": "yes"})),
    ("/v1/completions", orjson.dumps({"model": "m", "prompt": 7, "pad": PAD})),
    ("/generate", orjson.dumps({"input_ids": PAD})),
    ("/generate", orjson.dumps({"sampling_params": {"n": 1000}, "input_ids": [1] * 1000})),
    ("/v1/messages", b'{"model": "m", "messages": [' + PAD.encode()),
    ("/v1/messages", orjson.dumps({"model": "m", "max_tokens": 4, "messages": "hi",
                                   "pad": PAD})),
]


def test_a_bad_large_body_is_refused_alike_in_a_worker(
        fake: Fake, start_proxy: Callable[..., str]) -> None:
    in_loop = start_proxy([fake.url], offload_parse_bytes=None)
    worker = start_proxy([fake.url], offload_parse_bytes=1024)

    def answers(url: str) -> list[tuple[int, Any]]:
        out = []
        for path, raw in BAD_BODIES:
            answer = httpx.post(f"{url}/sessions/bad{path}", content=raw, timeout=60,
                                headers={"content-type": "application/json"})
            out.append((answer.status_code, answer.json()))
        return out

    expected = answers(in_loop)
    assert {status for status, _ in expected} == {400}
    assert expected[-1][1]["type"] == "error"  # Anthropic's shape on /v1/messages
    assert answers(worker) == expected
    assert offloaded(worker) == len(BAD_BODIES)
    assert fake.received == []
    assert httpx.get(f"{worker}/sessions/bad").status_code == 404


@pytest.fixture
def hold(tmp_path: Path) -> Iterator[ParseHold]:
    seam = ParseHold(tmp_path)
    yield seam
    seam.close()


@pytest.fixture
def held_proxy(fake: Fake, start_proxy: Callable[..., str], hold: ParseHold) -> str:
    return start_proxy([fake.url], offload_parse_bytes=1024, offload_parse_queue=0,
                       _app={"parse_hold": str(hold.path)})


def big_chat(url: str, path: str = "/v1/chat/completions") -> httpx.Response:
    body = {"model": "m", "max_tokens": 4,
            "messages": [{"role": "user", "content": "hi"}], "pad": PAD}
    return httpx.post(url + path, json=body, timeout=120)


@pytest.fixture
def background() -> Iterator[Callable[..., Future[Any]]]:
    with ThreadPoolExecutor(2) as pool:
        yield pool.submit


def test_healthz_answers_while_a_worker_parses_a_body(
        held_proxy: str, hold: ParseHold, fake: Fake,
        background: Callable[..., Future[Any]]) -> None:
    answer = background(big_chat, held_proxy)
    pid = hold.entered()
    assert pid != os.getpid()  # the parse runs in another process
    assert httpx.get(f"{held_proxy}/healthz", timeout=60).status_code == 200
    assert not answer.done() and fake.received == []
    hold.release()
    assert answer.result().status_code == 200
    assert len(fake.received) == 1
    assert offloaded(held_proxy) == 1


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
def test_a_killed_worker_is_a_503_and_the_next_body_gets_a_new_one(
        held_proxy: str, hold: ParseHold, fake: Fake, path: str,
        background: Callable[..., Future[Any]]) -> None:
    answer = background(big_chat, held_proxy, path)
    pid = hold.entered()
    os.kill(pid, signal.SIGKILL)
    refused = answer.result()
    assert refused.status_code == 503
    if path == "/v1/messages":
        assert refused.json()["type"] == "error"
        assert refused.json()["error"]["type"] == "overloaded_error"
    else:
        assert refused.json()["error"]["type"] == "server_error"
    assert "stopped" in refused.text and fake.received == []
    again = background(big_chat, held_proxy, path)
    assert hold.entered() != pid
    hold.release()
    assert again.result().status_code == 200


def test_a_killed_worker_reading_an_answer_is_a_503_and_the_session_goes_on(
        held_proxy: str, hold: ParseHold, fake: Fake,
        background: Callable[..., Future[Any]]) -> None:
    fake.switches.chars_per_token = 1
    session = f"{held_proxy}/sessions/answer"
    messages = [{"role": "user", "content": PAD}]
    body = {"model": "m", "max_tokens": 4, "messages": messages}
    answer = background(httpx.post, f"{session}/v1/chat/completions", json=body, timeout=120)
    hold.entered()
    hold.release()  # the body: the next parse is the echoed answer's
    os.kill(hold.entered(), signal.SIGKILL)
    refused = answer.result()
    assert refused.status_code == 503 and refused.json()["error"]["type"] == "server_error"
    again = background(httpx.post, f"{session}/v1/chat/completions", json=body, timeout=120)
    hold.entered()
    hold.release()
    hold.entered()
    hold.release()
    assert again.result().status_code == 200
    records = httpx.get(f"{session}/trajectory").json()["interactions"]
    assert [r["status"] for r in records] == [503, 200]  # what each client was told
    assert records[0]["response"] == refused.json()
    assert records[1]["prompt_token_ids"] == fake_prompt(messages, 1)


def test_a_body_past_the_queue_bound_is_a_429(
        held_proxy: str, hold: ParseHold, background: Callable[..., Future[Any]]) -> None:
    first = background(big_chat, held_proxy)
    hold.entered()
    refused = big_chat(held_proxy)
    assert refused.status_code == 429
    assert refused.json()["error"]["type"] == "rate_limit_error"
    assert refused.headers["retry-after"] == "1"
    hold.release()
    assert first.result().status_code == 200


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
def test_a_stopped_worker_is_a_503_past_the_bound_and_the_pool_starts_again(
        fake: Fake, start_proxy: Callable[..., str], hold: ParseHold, path: str,
        background: Callable[..., Future[Any]]) -> None:
    """A worker stopped (SIGSTOP) inside a parse: the body is a 503 once it has taken
    ``offload_parse_timeout_s``, in the route's error shape; the stopped worker is killed
    and the next body is parsed by a new one."""
    proxy = start_proxy([fake.url], offload_parse_bytes=1024, offload_parse_queue=0,
                        offload_parse_timeout_s=5, _app={"parse_hold": str(hold.path)})
    answer = background(big_chat, proxy, path)
    pid = hold.entered()
    os.kill(pid, signal.SIGSTOP)
    try:
        refused = answer.result()
        assert refused.status_code == 503, refused.text
        if path == "/v1/messages":
            assert refused.json()["error"]["type"] == "overloaded_error"
        else:
            assert refused.json()["error"]["type"] == "server_error"
        assert "took longer than 5 s" in refused.text and fake.received == []
        wait_until(lambda: gone(pid))
    finally:
        if not gone(pid):
            os.kill(pid, signal.SIGKILL)
    again = background(big_chat, proxy, path)
    assert hold.entered() != pid
    hold.release()
    assert again.result().status_code == 200
    assert len(fake.received) == 1


def test_a_client_that_leaves_during_a_parse_gives_its_place_back(
        held_proxy: str, hold: ParseHold, fake: Fake,
        background: Callable[..., Future[Any]]) -> None:
    """One place (a worker, no queue): a client that leaves while its body is parsed
    frees it at once, so the next body is taken (not a 429) even while the worker is
    still inside the first parse; both parses then run and the next body is answered."""
    body = orjson.dumps({"model": "m", "max_tokens": 4, "pad": PAD,
                         "messages": [{"role": "user", "content": "hi"}]})
    host, port = held_proxy.removeprefix("http://").split(":")
    gone = socket.create_connection((host, int(port)))
    gone.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
                 b"content-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                 % (len(body), body))
    hold.entered()
    gone.close()

    def admitted() -> httpx.Response:
        """``big_chat`` until it is not refused for want of a place (the proxy saw the
        client leave); a 429 after a generous while is the answer."""
        deadline = time.monotonic() + 60
        while True:
            answer = big_chat(held_proxy)
            if answer.status_code != 429 or time.monotonic() > deadline:
                return answer
            time.sleep(0.05)

    next_body = background(admitted)
    wait_until(lambda: offloaded(held_proxy) == 2 or next_body.done())
    assert not next_body.done(), next_body.result().text  # taken, waiting for the worker
    hold.release()  # the first parse ends (nobody waits for it)
    hold.entered()
    hold.release()
    assert next_body.result().status_code == 200
    assert len(fake.received) == 1


@pytest.mark.parametrize("value", [
    {"input_ids": list(range(100)), "a": [[True] * 70, [1] * 70 + [True], [2**63] * 70]},
    {"input_ids": [5] * 64, "b": [{"x": [1.0] * 80, "y": list(range(2**40, 2**40 + 80))},
                                  "s", None, [[7] * 64]]},
    {"input_ids": [1] * 63, "deep": orjson.loads(nested(60, "["))},
])
def test_packed_int_lists_unpack_to_the_same_values(value: Any) -> None:
    raw = orjson.dumps(value)
    body = unpacked(read_body(Endpoint.GENERATE, raw))
    assert body == decode_body(Endpoint.GENERATE, raw)
    assert orjson.dumps(body) == raw  # bools stay bools, floats floats
    for whole in (raw, orjson.dumps(value["input_ids"])):
        answer = read_answer(whole, None, False)
        assert isinstance(answer, Packed)
        assert orjson.dumps(unpacked(answer)) == whole
    assert read_answer(raw[:-1], None, False) == Invalid(
        str(_decode_error(raw[:-1])))


def answered(result: Packed | Invalid) -> Any:
    assert isinstance(result, Packed)
    return unpacked(result)


def _decode_error(raw: bytes) -> orjson.JSONDecodeError:
    with pytest.raises(orjson.JSONDecodeError) as caught:
        orjson.loads(raw)
    return caught.value


def test_an_echoed_prompt_crosses_as_checked_token_ids() -> None:
    def answer(prompt: list[Any]) -> bytes:
        return orjson.dumps({"choices": [{"index": 0, "prompt_token_ids": prompt}]})

    ids = [(i * 13) % 7000 for i in range(500)]
    got = answered(read_answer(answer(ids), None, True))
    prompt = got["choices"][0]["prompt_token_ids"]
    assert isinstance(prompt, TokenIds)
    assert prompt.ids == array("i", ids) and prompt.text == orjson.dumps(ids)[1:-1]
    known = TokenIds(array("i", ids[:300]))
    again = answered(read_answer(answer(ids), known, True))
    assert again["choices"][0]["prompt_token_ids"] == prompt
    for bad in ([*ids, -1], [*ids, 2**31], [*ids, True]):
        got = answered(read_answer(answer(bad), None, True))
        assert got == orjson.loads(answer(bad))  # not token ids: as a plain parse
        assert not isinstance(got["choices"][0]["prompt_token_ids"], TokenIds)
