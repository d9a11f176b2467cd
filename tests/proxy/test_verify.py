"""``POST /sessions/{id}/verify`` through a real proxy in front of the fake SGLang:
Messages sessions, token-in-token-out sessions (replayed as their recorded prompt
ids), the bound on verifications at a time, and a client that leaves."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from seedproxy import derive_seed
from tests.conftest import Fake
from tests.helpers.fleet import Fleet
from tests.helpers.waiting import wait_until

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def verify(proxy: str, session: str) -> httpx.Response:
    return httpx.post(f"{proxy}/sessions/{session}/verify", timeout=60)


def chats(fake: Fake) -> list[dict[str, Any]]:
    return [r for r in fake.received if "messages" in r]


@pytest.fixture
def held(fake: Fake) -> Iterator[threading.Event]:
    """Chat answers wait until the test sets the event (set on the way out, always)."""
    release = threading.Event()
    try:
        yield release
    finally:
        release.set()
        fake.switches.hold = None


def test_a_messages_session_verifies_and_a_divergence_is_named(
    fake: Fake, start_proxy: Callable[..., str]
) -> None:
    proxy = start_proxy([fake.url])
    body = {"model": "m", "max_tokens": 5, "system": "Be brief.",
            "messages": [{"role": "user", "content": "hi"}]}
    for stream in (False, True):
        sent = httpx.post(f"{proxy}/sessions/msg/v1/messages", json={**body, "stream": stream},
                          timeout=30)
        assert sent.status_code == 200, sent.text
    live = chats(fake)
    report = verify(proxy, "msg")
    assert report.status_code == 200, report.text
    assert report.json() == {"session_id": "msg", "ok": True, "checked": 2, "skipped": 0,
                             "first_divergence": None}
    replayed = chats(fake)[len(live):]
    # Asked as the live requests were: the same translated chat, the same seeds.
    assert [r["seed"] for r in replayed] == [derive_seed("msg", 0), derive_seed("msg", 1)]
    assert [r["messages"] for r in replayed] == [r["messages"] for r in live]

    fake.switches.flip_at = 3
    diverged = verify(proxy, "msg").json()
    assert diverged["ok"] is False and diverged["checked"] == 1
    assert (diverged["first_divergence"]["request_index"],
            diverged["first_divergence"]["position"]) == (0, 3)


def test_beyond_one_verify_per_upstream_it_is_a_429_and_nothing_is_sent(
    fake: Fake, start_proxy: Callable[..., str], held: threading.Event
) -> None:
    proxy = start_proxy([fake.url])
    for _ in range(3):
        assert httpx.post(f"{proxy}/sessions/busy/v1/chat/completions", json=CHAT,
                          timeout=30).status_code == 200
    before = len(chats(fake))
    fake.switches.hold = held
    first: list[httpx.Response] = []
    worker = threading.Thread(target=lambda: first.append(verify(proxy, "busy")))
    worker.start()
    wait_until(lambda: len(chats(fake)) == before + 1)  # the first replay is upstream
    others = [verify(proxy, "busy") for _ in range(7)]
    for refused in others:
        assert refused.status_code == 429
        error = refused.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert error["type"] == "rate_limit_error" and "one per upstream" in error["message"]
        assert refused.headers["retry-after"] == "1"
    held.set()
    worker.join(60)
    assert first[0].json()["ok"] is True and first[0].json()["checked"] == 3
    assert len(chats(fake)) == before + 3  # 8 verifications, one replay upstream
    assert verify(proxy, "busy").json()["ok"] is True  # the slot is free again


def test_a_verify_whose_client_leaves_stops_sending(
    fake: Fake, start_proxy: Callable[..., str], held: threading.Event
) -> None:
    proxy = start_proxy([fake.url])
    for _ in range(4):
        assert httpx.post(f"{proxy}/sessions/gone/v1/chat/completions", json=CHAT,
                          timeout=30).status_code == 200
    assert httpx.post(f"{proxy}/sessions", json={"session_id": "empty"}).status_code == 201
    before = len(chats(fake))
    fake.switches.hold = held
    address = urlsplit(proxy)
    client = socket.create_connection((address.hostname, address.port))
    client.sendall(b"POST /sessions/gone/verify HTTP/1.1\r\nhost: x\r\n"
                   b"content-length: 0\r\n\r\n")
    wait_until(lambda: len(chats(fake)) == before + 1)  # replaying, held upstream
    client.close()
    # The verification ends when its client leaves: its slot frees with the answer
    # still held (a verify of a session with nothing to replay sends nothing).
    wait_until(lambda: verify(proxy, "empty").status_code == 200)
    held.set()
    report = verify(proxy, "gone").json()
    assert report["ok"] is True and report["checked"] == 4
    assert len(chats(fake)) == before + 1 + 4  # the one in flight, then a whole replay


@pytest.fixture(scope="module")
def tokenizer_path() -> str:
    pytest.importorskip("transformers")
    from seedproxy.engine.model import default_gguf_path, gguf_tokenizer_dir

    return str(gguf_tokenizer_dir(default_gguf_path()))


@pytest.mark.parametrize(("route", "store"),
                         [("chat", "memory"), ("messages", "memory"), ("chat", "sqlite")])
def test_a_token_in_token_out_session_replays_its_prompt_ids_to_generate(
    route: str, store: str, fake: Fake, start_proxy: Callable[..., str],
    tokenizer_path: str, tmp_path: Path
) -> None:
    """The second turn's prompt is stored as a reference to the first turn plus the
    ids it adds: the replay sends the whole prompt, in every store."""
    fake.switches.vocab_base = 1000  # ordinary SmolLM2 tokens, sampled from seed and prompt
    url = f"sqlite:///{tmp_path / 's.db'}" if store == "sqlite" else "memory://"
    proxy = start_proxy([fake.url], token_in_token_out=True, tokenizer=tokenizer_path,
                        store=url)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
    for turn in range(2):
        if route == "chat":
            answer = httpx.post(f"{proxy}/sessions/t/v1/chat/completions", timeout=30,
                                json={"model": "m", "messages": messages, "max_tokens": 4,
                                      "temperature": 0.7, "n": 2 if turn else 1})
            assert answer.status_code == 200, answer.text
            reply = answer.json()["choices"][0]["message"]["content"]
        else:
            answer = httpx.post(f"{proxy}/sessions/t/v1/messages", timeout=30,
                                json={"model": "m", "messages": messages, "max_tokens": 4,
                                      "temperature": 0.7})
            assert answer.status_code == 200, answer.text
            reply = answer.json()["content"][0]["text"]
        messages += [{"role": "assistant", "content": reply},
                     {"role": "user", "content": f"more {turn}"}]
    recorded = httpx.get(f"{proxy}/sessions/t/trajectory").json()["interactions"]
    live = len(fake.received)

    report = verify(proxy, "t")
    assert report.status_code == 200, report.text
    assert report.json() == {"session_id": "t", "ok": True, "checked": 2, "skipped": 0,
                             "first_divergence": None}
    replayed = fake.received[live:]
    expected = [(turn["prompt_token_ids"], seed) for turn in recorded
                for seed in (turn["seed"] if isinstance(turn["seed"], list) else [turn["seed"]])]
    assert [(r["input_ids"], r["sampling_params"]["sampling_seed"]) for r in replayed] == expected
    first, second = recorded
    head = first["prompt_token_ids"] + first["completion_token_ids"]
    assert second["prompt_token_ids"][:len(head)] == head  # an extending turn
    assert all(r["sampling_params"]["temperature"] == 0.7 and
               r["sampling_params"]["max_new_tokens"] == 4 for r in replayed)

    fake.switches.flip_at = 2
    diverged = verify(proxy, "t").json()["first_divergence"]
    assert (diverged["request_index"], diverged["choice"], diverged["position"]) == (0, 0, 2)
    assert diverged["expected"]["token_id"] == recorded[0]["completion_token_ids"][2]


def test_two_upstreams_run_two_verifications_at_a_time(
    start_proxy: Callable[..., str]
) -> None:
    fleet = Fleet(2)
    release = threading.Event()
    try:
        proxy = start_proxy(fleet.urls)
        for session in ("a", "b", "c"):
            assert httpx.post(f"{proxy}/sessions/{session}/v1/chat/completions", json=CHAT,
                              timeout=30).status_code == 200
        for server in fleet.servers:
            server.switches.hold = release
        before = fleet.total_received()
        answers: dict[str, httpx.Response] = {}
        workers = [threading.Thread(target=lambda s=s: answers.__setitem__(s, verify(proxy, s)))
                   for s in ("a", "b")]
        for worker in workers:
            worker.start()
        wait_until(lambda: fleet.total_received() == before + 2)  # both replaying
        assert verify(proxy, "c").status_code == 429
        release.set()
        for worker in workers:
            worker.join(60)
        assert [answers[s].json()["ok"] for s in ("a", "b")] == [True, True]
        assert verify(proxy, "c").json()["ok"] is True
    finally:
        release.set()
        fleet.close()
