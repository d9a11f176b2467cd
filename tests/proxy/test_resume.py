"""Resuming a crashed rollout, and forking one, through the proxy in front of the fake
SGLang: requests matching the source's record are answered from it with no upstream
call (the fake's journal shows none), recorded ``replayed: true`` with the source's
tokens, logprobs and seeds; the first that differs goes live under the seed rule."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest

from seedproxy import derive_seed
from tests.conftest import Fake

TOKEN_FIELDS = ("prompt_token_ids", "completion_token_ids", "logprobs", "seed", "response",
                "finish_reason", "request", "interaction_id", "request_index")


def agent(base: str | list[str], session: str, turns: int, *, first: str = "task"
          ) -> list[str]:
    """A scripted chat agent: each turn sends the whole history and one new user message;
    odd turns stream; with several proxies, turn t goes to proxy t mod their number.
    Returns what the assistant said at each turn."""
    bases = [base] if isinstance(base, str) else base
    clients = [openai.OpenAI(base_url=f"{b}/sessions/{session}/v1", api_key="x",
                             max_retries=0) for b in bases]
    messages: list[Any] = []
    said = []
    for turn in range(turns):
        client = clients[turn % len(clients)]
        messages.append({"role": "user", "content": first if turn == 0 else f"step {turn}"})
        if turn % 2:
            stream = client.chat.completions.create(model="m", messages=messages,
                                                    max_tokens=4, stream=True)
            text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        else:
            answer = client.chat.completions.create(model="m", messages=messages, max_tokens=4)
            text = answer.choices[0].message.content or ""
        messages.append({"role": "assistant", "content": text})
        said.append(text)
    return said


def interactions(base: str, session: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = httpx.get(f"{base}/sessions/{session}/trajectory").json()[
        "interactions"]
    return found


def create(base: str, **body: Any) -> httpx.Response:
    return httpx.post(f"{base}/sessions", json=body)


@pytest.mark.parametrize("store", ["memory", "sqlite", "redis"])
def test_a_resumed_rollout_replays_its_record_then_goes_live_with_the_same_seeds(
        store: str, fake: Fake, start_proxy: Callable[..., str], tmp_path: Path,
        request: pytest.FixtureRequest) -> None:
    url = {"memory": "memory://", "sqlite": f"sqlite:///{tmp_path / 's.db'}"}.get(store)
    if url is None:
        url = request.getfixturevalue("redis_url")
    base = start_proxy([fake.url], store=url)
    assert create(base, identity="17:3").status_code == 201
    crashed = agent(base, "17:3", 3)  # the harness dies after turn 3
    resumed = create(base, resume="17:3")
    assert resumed.status_code == 201
    member = resumed.json()["sessions"][0]
    assert (member["session_id"], member["identity"]) == ("17:3-1", "17:3")
    before = len(fake.received)
    rerun = agent(base, "17:3-1", 5)
    live = fake.received[before:]
    # Turns 0-2 came from the record: only turns 3 and 4 reached the upstream, with the
    # seed rule's seeds at those indices.
    assert [r["seed"] for r in live] == [derive_seed("17:3", 3), derive_seed("17:3", 4)]
    assert [r["seed"] for r in live] == [1645000670, 1763978365]
    assert rerun[:3] == crashed
    fresh = create(base, identity="17:3").json()["sessions"][0]["session_id"]
    assert agent(base, fresh, 5) == rerun  # live continuation = what a fresh rerun gets
    source, replay, again = (interactions(base, s) for s in ("17:3", "17:3-1", fresh))
    assert [i.get("replayed", False) for i in replay] == [True, True, True, False, False]
    assert [i["seed"] for i in replay] == [1152644103, 817236710] + [
        derive_seed("17:3", k) for k in range(2, 5)]
    for old, new in zip(source, replay[:3], strict=True):
        assert {k: new[k] for k in TOKEN_FIELDS} == {k: old[k] for k in TOKEN_FIELDS}
        assert new["upstream"] is None and old["upstream"] == fake.url
    for live_turn, fresh_turn in zip(replay[3:], again[3:], strict=True):
        assert live_turn["completion_token_ids"] == fresh_turn["completion_token_ids"]
        assert live_turn["seed"] == fresh_turn["seed"]


def test_replicas_on_one_redis_store_share_the_replay(
        fake: Fake, start_proxy: Callable[..., str], redis_url: str) -> None:
    one, two = (start_proxy([fake.url], store=redis_url) for _ in range(2))
    agent([one, two], "rep", 4)
    assert create(two, resume="rep").status_code == 201
    count = len(fake.received)
    agent([two, one], "rep-1", 6)
    assert [r["seed"] for r in fake.received[count:]] == [derive_seed("rep", 4),
                                                          derive_seed("rep", 5)]
    assert [i.get("replayed", False) for i in interactions(one, "rep-1")] == [True] * 4 + [
        False] * 2


def test_headers_say_replayed_and_carry_the_recorded_seed(
        fake: Fake, proxy: str) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
    first = httpx.post(f"{proxy}/sessions/h/v1/chat/completions", json=body)
    create(proxy, resume="h")
    count = len(fake.received)
    again = httpx.post(f"{proxy}/sessions/h-1/v1/chat/completions", json=body)
    assert len(fake.received) == count
    assert again.headers["x-seedproxy-replayed"] == "true"
    assert again.headers["x-seedproxy-seed"] == first.headers["x-seedproxy-seed"] == str(
        derive_seed("h", 0))
    assert "x-seedproxy-upstream" not in again.headers
    assert again.json() == first.json()
    assert "x-seedproxy-replayed" not in first.headers
    assert "seedproxy_replayed_total 1.0" in httpx.get(f"{proxy}/metrics").text


ROUTES: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {"model": "m", "messages": [{"role": "user", "content": "hi"}],
                             "max_tokens": 3},
    "/v1/completions": {"model": "m", "prompt": "hi", "max_tokens": 3},
    "/v1/responses": {"model": "m", "input": "hi", "max_output_tokens": 3},
    "/generate": {"text": "hi", "sampling_params": {"max_new_tokens": 3}},
}


@pytest.mark.parametrize("route", list(ROUTES))
def test_every_route_replays_its_answer_whole_and_streamed(
        fake: Fake, proxy: str, route: str) -> None:
    """A stream is rebuilt from the record (chat, completions, /generate); a streamed
    Responses request goes live."""
    def send(session: str, stream: bool) -> httpx.Response:
        return httpx.post(f"{proxy}/sessions/{session}{route}",
                          json={**ROUTES[route], "stream": stream}, timeout=30)

    def shown(answer: httpx.Response) -> Any:
        """A whole answer; a stream's text (``/generate`` streams cumulative text)."""
        if not answer.headers["content-type"].startswith("text/event-stream"):
            return answer.json()
        events = [orjson.loads(line[6:]) for line in answer.text.splitlines()
                  if line.startswith("data: ") and line != "data: [DONE]"]
        if route == "/generate":
            return events[-1]["text"]
        if route == "/v1/responses":
            return "".join(e.get("delta") or "" for e in events
                           if e["type"] == "response.output_text.delta")
        return "".join(c.get("text") or (c.get("delta") or {}).get("content") or ""
                       for e in events for c in e["choices"])

    originals = [shown(send("rt", stream)) for stream in (False, True)]
    create(proxy, resume="rt")
    count = len(fake.received)
    again = [send("rt-1", stream) for stream in (False, True)]
    assert [a.headers.get("x-seedproxy-replayed") for a in again] == (
        ["true", None] if route == "/v1/responses" else ["true", "true"])
    assert [shown(a) for a in again] == originals
    assert len(fake.received) == count + (1 if route == "/v1/responses" else 0)


def test_once_a_request_differs_every_later_one_goes_live(fake: Fake, proxy: str) -> None:
    """Independent requests (no history in the body): a matching request after a
    divergence still goes live, so the session never jumps back into the record."""
    def ask(session: str, word: str) -> httpx.Response:
        return httpx.post(f"{proxy}/sessions/{session}/v1/completions",
                          json={"model": "m", "prompt": word, "max_tokens": 3})

    originals = [ask("d", w).json() for w in ("a", "b", "c")]
    create(proxy, resume="d")
    count = len(fake.received)
    answers = [ask("d-1", w) for w in ("a", "x", "c")]
    assert [a.headers.get("x-seedproxy-replayed") for a in answers] == ["true", None, None]
    assert [r["prompt"] for r in fake.received[count:]] == ["x", "c"]
    assert [r["seed"] for r in fake.received[count:]] == [derive_seed("d", 1),
                                                          derive_seed("d", 2)]
    assert answers[0].json() == originals[0]  # from the record, its clock field too
    live = answers[2].json()
    assert live["choices"] == originals[2]["choices"] and live["id"] == originals[2]["id"]


def test_a_changed_field_or_a_pinned_index_goes_live_metadata_does_not(
        fake: Fake, proxy: str) -> None:
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}],
                            "max_tokens": 3}
    httpx.post(f"{proxy}/sessions/p/v1/chat/completions", json={**body, "user": "u1"})
    httpx.post(f"{proxy}/sessions/p/v1/chat/completions", json=body)
    cases: list[tuple[dict[str, Any], str | None]] = [
        ({"user": "u2", "metadata": {"run": "2"}}, "true"), ({"max_tokens": 4}, None)]
    for n, (extra, replayed) in enumerate(cases):
        create(proxy, resume="p")
        sent = httpx.post(f"{proxy}/sessions/p-{n + 1}/v1/chat/completions",
                          json={**body, **extra})
        assert sent.headers.get("x-seedproxy-replayed") == replayed
    create(proxy, resume="p")
    pinned = httpx.post(f"{proxy}/sessions/p-3/v1/chat/completions", json=body,
                        headers={"x-request-index": "1"})
    assert "x-seedproxy-replayed" not in pinned.headers


def test_a_content_keyed_session_replays_siblings_in_any_order(
        fake: Fake, proxy: str) -> None:
    def ask(session: str, word: str) -> httpx.Response:
        return httpx.post(f"{proxy}/sessions/{session}/v1/completions",
                          json={"model": "m", "prompt": word, "max_tokens": 3})

    create(proxy, session_id="ck", index_by="content")
    originals = [ask("ck", w).json() for w in ("a", "b", "a")]
    made = create(proxy, resume="ck")
    assert made.json()["sessions"][0]["session_id"] == "ck-1"
    assert httpx.get(f"{proxy}/sessions/ck-1").json()["replays"] == {"session": "ck",
                                                                       "at": None}
    count = len(fake.received)
    answers = [ask("ck-1", w) for w in ("b", "a", "a", "a")]
    assert [a.headers.get("x-seedproxy-replayed") for a in answers] == [
        "true", "true", "true", None]  # "a" came twice in the record, not three times
    assert [a.json() for a in answers[:3]] == [originals[1], originals[0], originals[2]]
    assert [r["prompt"] for r in fake.received[count:]] == ["a"]


def test_messages_are_replayed_whole_and_streamed_in_anthropics_shapes(
        fake: Fake, proxy: str) -> None:
    tools: list[Any] = [{"name": "search", "description": "look up",
                         "input_schema": {"type": "object",
                                          "properties": {"query": {"type": "string"}}}}]
    fake.switches.reasoning = True

    def run(session: str) -> list[Any]:
        client = anthropic.Anthropic(base_url=f"{proxy}/sessions/{session}", api_key="x",
                                     max_retries=0)
        history: list[Any] = [{"role": "user", "content": "find it"}]
        whole = client.messages.create(model="m", max_tokens=6, messages=history, tools=tools)
        history += [{"role": "assistant", "content": [b.model_dump() for b in whole.content]},
                    {"role": "user", "content": [{"type": "tool_result",
                                                  "tool_use_id": whole.content[-1]
                                                  .model_dump()["id"],
                                                  "content": "found"}]}]
        with client.messages.stream(model="m", max_tokens=6, messages=history,
                                    tools=tools) as stream:
            streamed = stream.get_final_message()
        return [whole.model_dump(), streamed.model_dump()]

    original = run("an")
    assert original[0]["stop_reason"] == "tool_use"
    assert [b["type"] for b in original[1]["content"]] == ["thinking", "text"]
    create(proxy, resume="an")
    count = len(fake.received)
    assert run("an-1") == original
    assert len(fake.received) == count
    source, replay = interactions(proxy, "an"), interactions(proxy, "an-1")
    for old, new in zip(source, replay, strict=True):
        assert new["replayed"] is True
        assert {k: new[k] for k in TOKEN_FIELDS} == {k: old[k] for k in TOKEN_FIELDS}


def test_a_fork_replays_its_prefix_then_samples_with_its_own_identity(
        fake: Fake, proxy: str) -> None:
    create(proxy, identity="tree")
    original = agent(proxy, "tree", 4)
    made = create(proxy, identity="tree.a", fork={"session": "tree", "at": 2})
    assert made.status_code == 201
    count = len(fake.received)
    branch = agent(proxy, "tree.a", 4)
    assert branch[:2] == original[:2]
    assert [r["seed"] for r in fake.received[count:]] == [derive_seed("tree.a", 2),
                                                          derive_seed("tree.a", 3)]
    replay = interactions(proxy, "tree.a")
    assert [i.get("replayed", False) for i in replay] == [True, True, False, False]
    assert [i["seed"] for i in replay] == [derive_seed("tree", 0), derive_seed("tree", 1),
                                           derive_seed("tree.a", 2), derive_seed("tree.a", 3)]
    group = create(proxy, identity="tree.g", group_size=2, fork={"session": "tree", "at": 1})
    assert [s["identity"] for s in group.json()["sessions"]] == ["tree.g:0", "tree.g:1"]


@pytest.mark.parametrize("body", [
    {"identity": "task7", "group_size": 2},  # branch task7:0 is the source's identity
    {"identity": "task7:0"},
    {"session_id": "task7:0"},  # no identity: the session id is the branch's
])
def test_no_fork_branch_gets_the_source_identity(
        fake: Fake, proxy: str, body: dict[str, Any]) -> None:
    """Issue 34, item 2: a branch with the source's identity would re-sample its seeds."""
    assert create(proxy, session_id="run1:0", identity="task7:0").status_code == 201
    agent(proxy, "run1:0", 3)
    refused = create(proxy, fork={"session": "run1:0", "at": 1}, **body)
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["param"] == "identity" and "'task7:0'" in error["message"]
    assert [s["session_id"] for s in httpx.get(f"{proxy}/sessions").json()["sessions"]] == [
        "run1:0"]
    made = create(proxy, identity="task8", group_size=2, fork={"session": "run1:0", "at": 1})
    assert [s["identity"] for s in made.json()["sessions"]] == ["task8:0", "task8:1"]


@pytest.mark.parametrize(("body", "status", "param"), [
    ({"resume": "nobody"}, 404, "resume"),
    ({"fork": {"session": "nobody", "at": 1}, "identity": "z"}, 404, "fork"),
    ({"resume": "src", "fork": {"session": "src", "at": 1}}, 400, "fork"),
    ({"resume": "src", "identity": "other"}, 400, "identity"),
    ({"resume": "src", "group_size": 2}, 400, "group_size"),
    ({"resume": "src", "index_by": "content"}, 400, "index_by"),
    ({"fork": {"session": "src", "at": 1}, "identity": "src"}, 400, "identity"),
    ({"resume": "bad id\n"}, 400, "resume"),
])
def test_bad_resume_and_fork_requests_are_refused(
        proxy: str, body: dict[str, Any], status: int, param: str) -> None:
    create(proxy, identity="src")
    refused = create(proxy, **body)
    assert refused.status_code == status
    assert refused.json()["error"]["param"] == param
    assert [s["session_id"] for s in httpx.get(f"{proxy}/sessions").json()["sessions"]] == [
        "src"]
