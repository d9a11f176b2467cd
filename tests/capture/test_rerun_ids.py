"""A rerun of the same rollout (a second session of the same identity sending the same
requests) is reproducible against an upstream that, as SGLang and vLLM do, gives every
request a fresh ``id`` and reads the clock for ``created``: the records are equal
outside the documented fields (session id, ``latency_ms``, ``created``, timestamps), and
the answer ids the client saw (chat and completions ``id``, Responses ``id`` and its
output items' ids, Anthropic ``msg_``/``toolu_`` ids) are the same in both runs, and
differ from one request index to the next within a session."""

from __future__ import annotations

from typing import Any

import httpx
import orjson

from tests.conftest import Fake
from tests.helpers.replay_fields import strip_documented

MSG = [{"role": "user", "content": "hello"}]
TOOLS: list[Any] = [{
    "name": "search",
    "description": "look something up",
    "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}},
}]
ANTHROPIC = {"anthropic-version": "2023-06-01"}

ROLLOUT: list[tuple[str, dict[str, Any]]] = []
for _stream in (False, True):
    for _n in (1, 2):
        ROLLOUT.append(
            (
                "/v1/chat/completions",
                {"model": "m", "messages": MSG, "max_tokens": 4, "n": _n, "stream": _stream},
            )
        )
        ROLLOUT.append(
            (
                "/v1/completions",
                {"model": "m", "prompt": "once upon", "max_tokens": 4, "n": _n, "stream": _stream},
            )
        )
    ROLLOUT.append(
        (
            "/v1/responses",
            {"model": "m", "input": "hello", "max_output_tokens": 4, "stream": _stream},
        )
    )
    ROLLOUT.append(
        ("/v1/messages", {"model": "m", "max_tokens": 4, "messages": MSG, "stream": _stream})
    )
    ROLLOUT.append(
        (
            "/v1/messages",
            {"model": "m", "max_tokens": 4, "messages": MSG, "tools": TOOLS, "stream": _stream},
        )
    )


def answer_ids(value: Any) -> list[str]:
    """Every ``id`` / ``item_id`` string in an answer (or event), in order."""
    out: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if key in ("id", "item_id") and isinstance(item, str):
                out.append(item)
            else:
                out.extend(answer_ids(item))
    elif isinstance(value, list):
        for item in value:
            out.extend(answer_ids(item))
    return out


def events(text: str) -> list[Any]:
    out = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        for line in block.split("\n"):
            if line.startswith("data:"):
                data = line[len("data:"):].strip()
                if data and data != "[DONE]":
                    out.append(orjson.loads(data))
    return out


def run(proxy: str, session: str) -> list[list[str]]:
    """The rollout in ``session``; the ids the client saw, per request (first seen order)."""
    seen: list[list[str]] = []
    with httpx.Client(base_url=f"{proxy}/sessions/{session}", timeout=60) as client:
        for path, body in ROLLOUT:
            answer = client.post(path, json=body, headers=ANTHROPIC if "messages" in path else {})
            assert answer.status_code == 200, (path, body, answer.text)
            found = (answer_ids([e for e in events(answer.text)]) if body["stream"]
                     else answer_ids(answer.json()))
            assert found, (path, body)
            seen.append(list(dict.fromkeys(found)))
    return seen


def two_runs(proxy: str, http: httpx.Client) -> tuple[list[list[str]], list[list[str]], list[str]]:
    sessions = []
    for _ in range(2):
        made = http.post("/sessions", json={"identity": "rerun"})
        assert made.status_code == 201, made.text
        sessions.append(made.json()["sessions"][0]["session_id"])
    assert sessions[0] != sessions[1]
    return run(proxy, sessions[0]), run(proxy, sessions[1]), sessions


def test_a_rerun_shows_the_client_the_same_answer_ids(
    proxy: str, fake: Fake, http: httpx.Client
) -> None:
    first, second, _ = two_runs(proxy, http)
    upstream_ids = {r.get("rid") for r in fake.received}
    assert len(upstream_ids) == len(fake.received)  # the upstream's ids never repeat
    differ = [f"{k} {path} stream={body['stream']} n={body.get('n', 1)}: {first[k]} != {second[k]}"
              for k, (path, body) in enumerate(ROLLOUT) if first[k] != second[k]]
    assert not differ, "\n".join(differ)


def test_answer_ids_differ_between_the_indices_of_a_session(
    proxy: str, fake: Fake, http: httpx.Client
) -> None:
    first, _, _ = two_runs(proxy, http)
    owner: dict[str, int] = {}
    for k, ids in enumerate(first):
        for one in ids:
            assert owner.setdefault(one, k) == k, (
                f"id {one} of request {k} {ROLLOUT[k]} was already request "
                f"{owner[one]}'s {ROLLOUT[owner[one]]}")


def test_a_rerun_records_the_same_interactions_outside_the_documented_fields(
    proxy: str, fake: Fake, http: httpx.Client
) -> None:
    _, _, sessions = two_runs(proxy, http)
    records = [http.get(f"/sessions/{s}/trajectory").json() for s in sessions]
    assert [len(r["interactions"]) for r in records] == [len(ROLLOUT)] * 2
    a, b = (strip_documented(r) for r in records)
    differ = [
        f"{k} {ROLLOUT[k][0]} stream={ROLLOUT[k][1]['stream']}"
        for k, (one, other) in enumerate(zip(a["interactions"], b["interactions"], strict=True))
        if one != other
    ]
    assert not differ, "records differ: " + ", ".join(differ)
    assert a == b


def test_every_chunk_of_a_fanned_out_stream_shows_one_derived_id(
    proxy: str, http: httpx.Client
) -> None:
    """n=2 with usage: the choices' chunks and the merged usage chunk carry one id, the
    derived one (a replay of the identity shows it again)."""
    seen = []
    for _ in range(2):
        session = http.post("/sessions", json={"identity": "fan-usage"}).json()
        sid = session["sessions"][0]["session_id"]
        body = {"model": "m", "messages": MSG, "max_tokens": 4, "n": 2, "stream": True,
                "stream_options": {"include_usage": True}}
        with http.stream("POST", f"/sessions/{sid}/v1/chat/completions", json=body) as r:
            events = [orjson.loads(line[6:]) for line in r.iter_lines()
                      if line.startswith("data: {")]
        assert events[-1]["usage"] is not None and not events[-1]["choices"]
        ids = {event["id"] for event in events}
        assert len(ids) == 1 and ids.pop().startswith("chatcmpl-"), ids
        seen.append(events[0]["id"])
    assert seen[0] == seen[1]
