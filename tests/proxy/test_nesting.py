"""JSON nesting is bounded where it enters (``seedproxy.nesting.MAX_DEPTH``, 64): a
client's body, an admin body's ``metadata``, and a model's tool-call arguments. Deeper
client input is a 400 that uses no index; a model's deep arguments stay text. Whatever
was stored then exports, and ``GET /sessions`` lists it."""

from __future__ import annotations

from typing import Any

import httpx
import orjson

from seedproxy.nesting import MAX_DEPTH, too_deep
from tests.conftest import Fake


def nested(depth: int, kind: str = "{") -> str:
    """JSON text exactly ``depth`` containers deep."""
    if kind == "[":
        return "[" * depth + "]" * depth
    return '{"a":' * (depth - 1) + "{}" + "}" * (depth - 1)


def test_too_deep_counts_levels_without_recursion() -> None:
    assert not too_deep(orjson.loads(nested(MAX_DEPTH)))
    assert too_deep(orjson.loads(nested(MAX_DEPTH + 1)))
    assert not too_deep(orjson.loads(nested(MAX_DEPTH, "[")))
    assert too_deep(orjson.loads(nested(MAX_DEPTH + 1, "[")))
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    assert too_deep(deep)
    assert not too_deep("[[[[") and not too_deep(3)
    # A deep branch behind wide, shallow siblings (a long chat history) is still found.
    wide = [{"role": "user", "content": str(k)} for k in range(1000)]
    assert not too_deep({"messages": wide}, 3)
    assert too_deep({"messages": [*wide, {"content": [{"text": []}]}]}, 5)
    assert not too_deep({"messages": [*wide, {"content": [{"text": []}]}]}, 6)


def test_a_chat_body_nested_past_the_bound_is_a_400_using_no_index(
        http: httpx.Client, fake: Fake) -> None:
    for depth in (MAX_DEPTH, 100, 253, 300, 1000):
        raw = ('{"model": "m", "messages": [{"role": "user", "content": "hi", "x": '
               + nested(depth - 3) + "}]}")
        answer = http.post("/sessions/deep/v1/chat/completions", content=raw,
                           headers={"content-type": "application/json"})
        if depth <= MAX_DEPTH:
            assert answer.status_code == 200, answer.text
        else:
            assert answer.status_code == 400, (depth, answer.text)
            assert "nested" in answer.json()["error"]["message"]
    assert http.get("/sessions/deep").json()["next_index"] == 1
    assert len(fake.received) == 1
    assert http.post("/trajectories/export", json={"session_ids": ["deep"]}).status_code == 200


def test_a_deep_body_is_refused_after_turns_whose_messages_it_repeats(
        http: httpx.Client, fake: Fake) -> None:
    """Messages repeated byte for byte from the last recorded turn are not walked again
    for depth; what the request adds, and every other field, still is."""
    messages: list[Any] = [{"role": "user", "content": "hi"}]
    for _ in range(3):  # each turn repeats the last one's messages exactly
        answer = http.post("/sessions/deeper/v1/chat/completions",
                           json={"model": "m", "messages": messages})
        assert answer.status_code == 200, answer.text
        messages = [*messages, answer.json()["choices"][0]["message"],
                    {"role": "user", "content": "more"}]
    prefix = orjson.dumps(messages).decode()[1:-1]
    deep_message = '{"role": "user", "content": "hi", "x": ' + nested(MAX_DEPTH - 2) + "}"
    deep_field = nested(MAX_DEPTH)
    refused = [
        f'{{"model": "m", "messages": [{prefix}, {deep_message}]}}',
        f'{{"model": "m", "messages": [{prefix}], "metadata": {deep_field}}}',
        f'{{"model": "m", "metadata": {deep_field}, "messages": [{prefix}]}}',
    ]
    for raw in refused:
        answer = http.post("/sessions/deeper/v1/chat/completions", content=raw,
                           headers={"content-type": "application/json"})
        assert answer.status_code == 400, (raw[-80:], answer.text)
        assert "nested" in answer.json()["error"]["message"]
    # One level less is accepted, after the same prefix.
    fine = ('{"model": "m", "messages": [' + prefix + ', {"role": "user", "content": "hi", '
            '"x": ' + nested(MAX_DEPTH - 3) + "}]}")  # 64 levels
    answer = http.post("/sessions/deeper/v1/chat/completions", content=fine,
                       headers={"content-type": "application/json"})
    assert answer.status_code == 200, answer.text
    assert http.get("/sessions/deeper").json()["next_index"] == 4
    assert len(fake.received) == 4
    export = http.post("/trajectories/export", json={"session_ids": ["deeper"]})
    assert export.status_code == 200
    assert export.json()["trajectories"][0]["interactions"][3]["request"]["messages"][:-1] == (
        messages)


def test_session_metadata_nested_past_the_bound_is_refused(http: httpx.Client) -> None:
    for depth in (255, 300, 1000):
        raw = f'{{"session_id": "meta{depth}", "metadata": {{"m": {nested(depth)}}}}}'
        answer = http.post("/sessions", content=raw, headers={"content-type": "application/json"})
        assert answer.status_code == 400, (depth, answer.status_code, answer.text[:200])
        assert http.get(f"/sessions/meta{depth}").status_code == 404
    fine = {"session_id": "meta-ok", "metadata": orjson.loads(nested(MAX_DEPTH - 2))}
    assert http.post("/sessions", json=fine).status_code == 201
    assert http.get("/sessions").status_code == 200
    export = http.post("/trajectories/export", json={"session_ids": ["meta-ok"]})
    assert export.status_code == 200
    assert export.json()["trajectories"][0]["metadata"] == fine["metadata"]


TOOLS = [{"name": "search", "description": "look up",
          "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}}}]


def test_a_models_deep_tool_arguments_stay_text_and_the_session_exports(
        http: httpx.Client, fake: Fake) -> None:
    deep = '{"q": ' + nested(600, "[") + "}"
    fake.switches.call_tool = "search"
    fake.switches.call_arguments_text = deep
    answer = http.post("/sessions/tools-deep/v1/messages", json={
        "model": "m", "max_tokens": 8, "tools": TOOLS,
        "messages": [{"role": "user", "content": "find it"}]})
    assert answer.status_code == 200, answer.text
    use = [b for b in answer.json()["content"] if b["type"] == "tool_use"]
    assert use and use[0]["input"] == {"_raw_arguments": deep}
    http.post("/sessions/tools-deep/end")
    assert http.get("/sessions").status_code == 200
    export = http.post("/trajectories/export", json={"session_ids": ["tools-deep"]})
    assert export.status_code == 200, export.text[:300]
    assert len(export.json()["trajectories"][0]["interactions"]) == 1


def test_an_export_that_cannot_be_serialised_marks_nothing(
        fake: Fake, start_proxy: Any) -> None:
    """A record stored before the bound (here: put straight into the store) that cannot
    be encoded fails the export, and the session stays unexported for the next one."""
    import asyncio

    from seedproxy.sessions import MemoryStore, SessionManager

    store = MemoryStore()
    deep: Any = {}
    for _ in range(300):
        deep = {"a": deep}
    asyncio.run(SessionManager(store).create_group(session_id="legacy", metadata=deep))
    proxy = start_proxy([fake.url], _app={"store": store})
    assert httpx.post(proxy + "/sessions/legacy/end").status_code == 200
    asks = [("POST", "/trajectories/export", {"session_ids": ["legacy"]}),
            ("POST", "/trajectories/export", {}),
            ("GET", "/sessions/legacy/trajectory?wait=true", None)]
    for method, path, ask in asks:  # a fresh connection each: a 500 may close one
        assert httpx.request(method, proxy + path, json=ask, timeout=30).status_code == 500
        record = asyncio.run(store.get("legacy"))
        assert record is not None and not record.exported, path
