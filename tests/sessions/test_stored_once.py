"""Interactions stored once (a link to the turn extended + what it adds) read exactly as
the older whole records did, in every store; the per-process session view stays right
across replicas and restarts, and a turn costs the same store work at turn 30 as at 3.

Every rollout here runs through a real proxy (uvicorn on 127.0.0.1) in front of the
fake SGLang, driven over HTTP; the store is a real one wrapped in ``Tee``, which also
keeps each interaction in the older whole-JSON form for comparison.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from seedproxy.sessions import SessionStore, open_store
from seedproxy.sessions.codec import decode
from seedproxy.sessions.export import trajectory
from seedproxy.settings import Settings
from tests.conftest import Fake

pytest.importorskip("transformers")

from seedproxy.engine.model import default_gguf_path, gguf_tokenizer_dir  # noqa: E402
from seedproxy.proxy.app import create_app  # noqa: E402
from tests.helpers.servers import ServerThread  # noqa: E402

TEMPLATE = str(Path(__file__).parents[1] / "helpers" / "qwen3_style.jinja")
TOKENIZER = str(gguf_tokenizer_dir(default_gguf_path()))
EOT = 2
TITO = {"token_in_token_out": True, "tokenizer": TOKENIZER, "chat_template": TEMPLATE,
        "tool_parser": "hermes", "reasoning_parser": "think"}
STORES = ["memory", "sqlite", "redis"]

# The older SQLite schema of the interactions table (before record sequence numbers).
_OLD_TABLE = """CREATE TABLE interactions (
    session_id TEXT NOT NULL, interaction_id TEXT NOT NULL, request_index INTEGER NOT NULL,
    data BLOB NOT NULL, PRIMARY KEY (session_id, interaction_id))"""


class Tee:
    """A real store that counts the work of each call (one per call, plus one per
    record a call reads) and keeps every interaction's older whole-JSON form."""

    def __init__(self, inner: SessionStore) -> None:
        self.inner = inner
        self.work = 0
        self.legacy: dict[str, dict[str, bytes]] = {}

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)

        async def counted(*args: Any, **kwargs: Any) -> Any:
            result = await method(*args, **kwargs)
            self.work += 1
            if name == "interactions":
                self.work += len(result)
            elif name == "changes":
                self.work += len(result[1])
            return result

        return counted

    async def record(self, session_id: str, interaction: Any, **how: Any) -> Any:
        self.legacy.setdefault(session_id, {})[interaction.interaction_id] = orjson.dumps(
            interaction.to_storage())
        self.work += 1
        return await self.inner.record(session_id, interaction, **how)


@pytest.fixture(scope="module")
def encode() -> Callable[[str], list[int]]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(TOKENIZER)
    return lambda text: list(tok.encode(text, add_special_tokens=False)) + [EOT]


@pytest.fixture
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[str], str]:
    def url(kind: str) -> str:
        if kind == "redis":
            return str(request.getfixturevalue("redis_url"))
        return "memory://" if kind == "memory" else f"sqlite:///{tmp_path / 'store.db'}"

    return url


@pytest.fixture
def serve() -> Iterator[Callable[..., tuple[str, ServerThread]]]:
    servers: list[ServerThread] = []

    def start(fake: Fake, injected: Any, **overrides: Any) -> tuple[str, ServerThread]:
        """A proxy on ``injected`` (a store object), else on ``store=URL`` it opens."""
        server = ServerThread(create_app(Settings(upstream=[fake.url], **overrides),
                                         store=injected)).start()
        servers.append(server)
        return server.url, server

    yield start
    for server in servers:
        server.stop()


def _chat(http: httpx.Client, session: str, messages: list[Any], **extra: Any) -> Any:
    answer = http.post(f"/sessions/{session}/v1/chat/completions",
                       json={"model": "m", "messages": messages, **extra})
    assert answer.status_code == 200, answer.text
    return answer.json()


def _rollout(http: httpx.Client, session: str, turns: int) -> list[Any]:
    messages: list[Any] = [{"role": "system", "content": "Be brief."},
                           {"role": "user", "content": "turn 0"}]
    for turn in range(turns):
        reply = _chat(http, session, messages, max_tokens=8)["choices"][0]["message"]
        messages += [{"role": "assistant", "content": reply["content"]},
                     {"role": "user", "content": f"turn {turn + 1}"}]
    return messages


def _tito_fixtures(http: httpx.Client, fake: Fake, encode: Callable[[str], list[int]]) -> None:
    """Linear turns, a second continuation of a non-tip turn, an edited history (a full
    render that forks), ``n=2`` and a continuation of its second choice, Responses."""
    fake.switches.script = [encode(f"Answer {k}.") for k in range(12)]
    messages = _rollout(http, "t", 4)
    branch = messages[:4] + [{"role": "user", "content": "another way"}]
    _chat(http, "t", branch)
    edited = [{"role": "system", "content": "Be brief."}, *messages[1:3],
              {"role": "user", "content": "edited"}]
    _chat(http, "t", edited)
    two = _chat(http, "t2", [{"role": "user", "content": "pick"}], n=2)
    second = two["choices"][1]["message"]
    _chat(http, "t2", [{"role": "user", "content": "pick"},
                       {"role": "assistant", "content": second["content"]},
                       {"role": "user", "content": "more"}])
    first = http.post("/sessions/r/v1/responses", json={"model": "m", "input": "Capital?"})
    items = [{"role": "user", "content": "Capital?"}, *first.json()["output"],
             {"role": "user", "content": "And the second city?"}]
    assert http.post("/sessions/r/v1/responses",
                     json={"model": "m", "input": items}).status_code == 200


def _passthrough_fixtures(http: httpx.Client) -> None:
    """Chat turns (token ids captured), ``n=2``, completions, a pinned index, a retry."""
    messages = _rollout(http, "p", 3)
    _chat(http, "p", messages, n=2, max_tokens=4)
    http.post("/sessions/p/v1/completions", json={"model": "m", "prompt": "x", "max_tokens": 4})
    http.post("/sessions/p/v1/chat/completions", json={"model": "m", "messages": messages},
              headers={"x-request-index": "1"})
    body = {"model": "m", "messages": messages[:2], "max_tokens": 4}
    http.post("/sessions/p/v1/chat/completions", json=body)
    http.post("/sessions/p/v1/chat/completions", json=body,
              headers={"x-stainless-retry-count": "1"})


def _read(tee: Tee, url: str, work: Callable[[SessionStore], Any]) -> Any:
    """``work(store)`` on the proxy's store: the same one in memory, else a client of
    its own (a Redis connection belongs to one event loop)."""
    async def run() -> Any:
        if url == "memory://":
            return await work(tee.inner)
        store = open_store(url)
        try:
            return await work(store)
        finally:
            await store.close()

    return asyncio.run(run())


def _legacy_store(path: Path, legacy: dict[str, bytes], record: Any) -> SessionStore:
    """A SQLite file as the older schema wrote it, holding ``legacy`` whole records."""
    db = sqlite3.connect(path)
    db.execute(_OLD_TABLE)
    db.executemany("INSERT INTO interactions VALUES (?, ?, ?, ?)", [
        (record.session_id, iid, orjson.loads(blob)["request_index"], blob)
        for iid, blob in legacy.items()])
    db.commit()
    db.close()
    store = open_store(f"sqlite:///{path}")
    asyncio.run(store.create(dataclasses.replace(record)))  # ``record`` keeps its epoch
    return store


@pytest.mark.parametrize("kind", STORES)
@pytest.mark.parametrize("mode", ["tito", "passthrough"])
def test_records_and_both_exports_read_as_the_whole_records_did(
        kind: str, mode: str, fake: Fake, serve: Callable[..., tuple[str, ServerThread]],
        store_url: Callable[[str], str], tmp_path: Path,
        encode: Callable[[str], list[int]]) -> None:
    url = store_url(kind)
    tee = Tee(open_store(url))
    base, _ = serve(fake, tee, **(TITO if mode == "tito" else {}))
    with httpx.Client(base_url=base, timeout=60) as http:
        if mode == "tito":
            _tito_fixtures(http, fake, encode)
        else:
            _passthrough_fixtures(http)
        for session_id, legacy in tee.legacy.items():
            record = _read(tee, url, lambda store, sid=session_id: store.get(sid))
            old = _legacy_store(tmp_path / f"old-{session_id}.db", legacy, record)
            for style in ("individual", "concat"):
                expected = orjson.dumps(asyncio.run(trajectory(old, record, style)))
                shown = http.get(f"/sessions/{session_id}/trajectory", params={"style": style})
                assert shown.content == expected, (session_id, style)
            asyncio.run(old.close())
            stored = _read(tee, url, lambda store, sid=session_id: store.changes(sid, -1))[1]
            assert sum(map(len, stored)) < sum(map(len, legacy.values()))
    if mode == "tito":  # the linear turns are stored as links to the turn before
        links = {s.interaction.interaction_id: s.link for s in map(
            decode, _read(tee, url, lambda store: store.changes("t", -1))[1])}
        for turn in range(1, 4):
            link = links[f"i{turn}"]
            assert link is not None and link.interaction_id == f"i{turn - 1}"
            assert link.prompt > 0 and link.messages == 2 * turn and link.keys == 2 * turn
        assert links["i0"] is None


def _extends(base: str, session: str) -> list[Any]:
    turns = httpx.get(f"{base}/sessions/{session}/trajectory").json()["interactions"]
    return [t["lineage"]["extends"] for t in turns]


def _generated(fake: Fake) -> list[list[int]]:
    return [r["input_ids"] for r in fake.received if "input_ids" in r]


def _continues(fake: Fake, encode: Callable[[str], list[int]], answers: list[str]) -> None:
    """Each prompt sent upstream is the one before + its completion + new ids."""
    sent = _generated(fake)
    for k in range(1, len(sent)):
        head = sent[k - 1] + encode(answers[k - 1])
        assert sent[k][:len(head)] == head


def test_two_replicas_on_one_redis_store_see_each_others_turns(
        fake: Fake, serve: Callable[..., tuple[str, ServerThread]], redis_url: str,
        encode: Callable[[str], list[int]]) -> None:
    answers = [f"Reply number {k}." for k in range(4)]
    fake.switches.script = [encode(a) for a in answers]
    a, _ = serve(fake, None, store=redis_url, **TITO)
    b, _ = serve(fake, None, store=redis_url, **TITO)
    messages: list[Any] = [{"role": "user", "content": "start"}]
    for turn, replica in enumerate([a, b, a, b]):
        with httpx.Client(base_url=replica, timeout=60) as http:
            reply = _chat(http, "two", messages)["choices"][0]["message"]["content"]
        messages += [{"role": "assistant", "content": reply},
                     {"role": "user", "content": f"next {turn}"}]
    assert _extends(a, "two") == [None] + [
        {"interaction_id": f"i{k}", "choice": 0} for k in range(3)]
    _continues(fake, encode, answers)


def test_a_restarted_sqlite_proxy_goes_on_from_the_file(
        fake: Fake, serve: Callable[..., tuple[str, ServerThread]], tmp_path: Path,
        encode: Callable[[str], list[int]]) -> None:
    answers = [f"Step {k} done." for k in range(4)]
    fake.switches.script = [encode(a) for a in answers]
    url = f"sqlite:///{tmp_path / 'rollout.db'}"
    messages: list[Any] = [{"role": "user", "content": "start"}]
    for turn in range(4):
        base, server = serve(fake, None, store=url, **TITO)  # a fresh proxy every turn
        with httpx.Client(base_url=base, timeout=60) as http:
            reply = _chat(http, "re", messages)["choices"][0]["message"]["content"]
        messages += [{"role": "assistant", "content": reply},
                     {"role": "user", "content": f"next {turn}"}]
        if turn < 3:
            server.stop()
    assert _extends(base, "re") == [None] + [
        {"interaction_id": f"i{k}", "choice": 0} for k in range(3)]
    _continues(fake, encode, answers)


@pytest.mark.parametrize("kind", STORES)
@pytest.mark.parametrize("mode", ["tito", "passthrough"])
def test_a_turn_costs_the_same_store_work_at_turn_30_as_at_turn_3(
        kind: str, mode: str, fake: Fake, serve: Callable[..., tuple[str, ServerThread]],
        store_url: Callable[[str], str], encode: Callable[[str], list[int]]) -> None:
    fake.switches.script = [encode(f"Reply {k}.") for k in range(31)]
    tee = Tee(open_store(store_url(kind)))
    base, _ = serve(fake, tee, **(TITO if mode == "tito" else {}))
    work: dict[int, int] = {}
    messages: list[Any] = [{"role": "user", "content": "start"}]
    with httpx.Client(base_url=base, timeout=60) as http:
        for turn in range(1, 31):
            before = tee.work
            reply = _chat(http, "long", messages, max_tokens=4)["choices"][0]["message"]
            work[turn] = tee.work - before
            messages += [{"role": "assistant", "content": reply["content"]},
                         {"role": "user", "content": f"turn {turn}"}]
    assert work[3] == work[30] and work[3] > 0
