"""An upstream that fails inside a stream (an SSE ``error`` event, or a stall past the
read timeout) is a failure on every stream path: single chat, an n=2 fan-out, a
Responses or Messages stream bridged to chat, and token in, token out. The client gets
its protocol's error event and no success terminator, and the interaction is recorded
with the failure's status and the tokens generated before it (the contract's "Records
and exports" rules).

The fake SGLang sends ``ERROR_AT`` tokens, then ``data: {"error": {..., "code": 500}}``
and ``data: [DONE]``, as SGLang and vLLM end a failing stream (``Switches.error_after``);
or it sends one token and then nothing until the test lets it go
(``Switches.stall_after``): the proxy's own read timeout ends it, no timing luck."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.conftest import Fake
from tests.helpers.fake_sglang import chat_prompt, detok, tokenize, tokens_for

ERROR_AT = 2
"""Tokens each upstream stream sends before its error event."""
STATUS = 500
MSG = [{"role": "user", "content": "hello"}]
CHAT = {"model": "m", "messages": MSG, "max_tokens": 8, "stream": True}
READ_TIMEOUT_S = 1.0
TEMPLATE = str(Path(__file__).parents[1] / "helpers" / "qwen3_style.jinja")


# --- helpers ---------------------------------------------------------------------------


def sse(text: str) -> list[tuple[str | None, Any]]:
    """(event name or None, parsed data or the raw data string) for each SSE event."""
    out: list[tuple[str | None, Any]] = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        name, data = None, []
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[len("event:"):].strip()
            elif line.startswith("data:"):
                data.append(line[len("data:"):].strip())
        if name is None and not data:
            continue
        raw = "\n".join(data)
        try:
            out.append((name, orjson.loads(raw)))
        except orjson.JSONDecodeError:
            out.append((name, raw))
    return out


def openai_error(events: list[tuple[str | None, Any]]) -> dict[str, Any]:
    """The stream's last event is an OpenAI error event, and no [DONE] came."""
    assert "[DONE]" not in [data for _, data in events], events[-3:]
    last = events[-1][1]
    assert isinstance(last, dict) and isinstance(last.get("error"), dict), events[-3:]
    assert set(last["error"]) == {"message", "type", "param", "code"}
    return last["error"]  # type: ignore[no-any-return]


def timed_out(error: dict[str, Any]) -> bool:
    """A timeout error event: code 504 where it gives a code (as an upstream's error events
    do), else a message that says so (the proxy's own events today)."""
    if error.get("code") is not None:
        return error["code"] in (504, "504")
    return "timed out" in str(error.get("message"))


def chat_text(events: list[tuple[str | None, Any]], index: int = 0) -> str:
    text = ""
    for _, data in events:
        if isinstance(data, dict):
            for choice in data.get("choices") or []:
                if choice.get("index") == index:
                    text += (choice.get("delta") or {}).get("content") or choice.get("text") or ""
    return text


def partial_text(sent: dict[str, Any], count: int = ERROR_AT) -> str:
    """The words the fake generated for ``sent`` (a chat request) before it failed."""
    prompt = tokenize(chat_prompt(sent.get("messages") or []))
    ids = tokens_for(prompt, sent.get("seed", 42), sent.get("temperature", 1.0) or 1.0, 8)
    return detok(ids[:count]).strip()


def interactions(http: httpx.Client, session: str) -> list[dict[str, Any]]:
    answer = http.get(f"/sessions/{session}/trajectory")
    assert answer.status_code == 200, answer.text
    return answer.json()["interactions"]  # type: ignore[no-any-return]


def the_record(http: httpx.Client, session: str) -> dict[str, Any]:
    records = interactions(http, session)
    assert len(records) == 1, records
    return records[0]


@pytest.fixture
def failing(fake: Fake) -> Fake:
    fake.switches.error_after = ERROR_AT
    fake.switches.error_status = STATUS
    return fake


@pytest.fixture
def stalling(fake: Fake) -> Iterator[Fake]:
    """Each upstream stream sends one token, then stalls until the test ends."""
    fake.switches.stall_after = 1
    try:
        yield fake
    finally:
        fake.switches.stall_release.set()  # the fake's streams go on, and its server stops


# --- token in, token out in front of the fake's /generate -------------------------------


def tito_tokenizer() -> str:
    pytest.importorskip("transformers")
    from seedproxy.engine.model import default_gguf_path, gguf_tokenizer_dir

    return str(gguf_tokenizer_dir(default_gguf_path()))


def tito_proxy(start_proxy: Callable[..., str], fake: Fake, **extra: Any) -> str:
    return start_proxy([fake.url], token_in_token_out=True, tokenizer=tito_tokenizer(),
                       chat_template=TEMPLATE, tool_parser="hermes", reasoning_parser="think",
                       **extra)


def encode(text: str) -> list[int]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tito_tokenizer())
    return list(tok.encode(text, add_special_tokens=False)) + [2]  # + <|im_end|>


def decode(ids: list[int]) -> str:
    from transformers import AutoTokenizer

    return str(AutoTokenizer.from_pretrained(tito_tokenizer()).decode(ids))


# --- 1. a mid-stream error event --------------------------------------------------------


def test_a_chat_stream_that_fails_mid_way_ends_in_an_error_and_is_recorded_as_one(
    failing: Fake, http: httpx.Client
) -> None:
    answer = http.post("/sessions/err-chat/v1/chat/completions", json=CHAT)
    events = sse(answer.text)
    error = openai_error(events)
    assert error["code"] == STATUS
    expected = partial_text(failing.received[-1])
    assert chat_text(events) == expected  # the tokens sent before the error reached the client
    record = the_record(http, "err-chat")
    assert record["status"] == STATUS
    assert record["finish_reason"] != "length" and record["abandoned"] is False
    assert expected in orjson.dumps(record["response"]).decode()
    assert len(record["logprobs"]) == ERROR_AT
    assert record["completion_token_ids"] in ([], None) or (
        detok(record["completion_token_ids"]).strip() == expected)


def test_a_fanned_out_stream_that_fails_mid_way_ends_in_an_error_and_is_recorded_as_one(
    failing: Fake, http: httpx.Client
) -> None:
    answer = http.post("/sessions/err-fan/v1/chat/completions", json={**CHAT, "n": 2})
    assert answer.headers["x-seedproxy-seed"].count(",") == 1  # two upstream requests
    events = sse(answer.text)
    error = openai_error(events)
    assert error["code"] == STATUS
    record = the_record(http, "err-fan")
    assert record["status"] == STATUS
    sent = {r["seed"]: r for r in failing.received}
    expected = [partial_text(sent[seed]) for seed in record["seed"]]
    shown = orjson.dumps(record["response"]).decode()
    # the stream that failed first had sent all of its tokens; the other one a prefix
    assert any(text in shown for text in expected), (expected, shown)
    for j, text in enumerate(expected):
        assert text.startswith(chat_text(events, j))


def test_a_responses_stream_that_fails_mid_way_ends_in_an_error_not_completed(
    failing: Fake, http: httpx.Client
) -> None:
    body = {"model": "m", "input": "hello", "max_output_tokens": 8, "stream": True}
    answer = http.post("/sessions/err-resp/v1/responses", json=body)
    events = sse(answer.text)
    names = [name for name, _ in events]
    assert "response.completed" not in names, names
    assert names[-1] in ("error", "response.failed"), names
    last = events[-1][1]
    if names[-1] == "error":  # OpenAI's streamed error event
        error = last.get("error", last)
        assert error.get("code") in (STATUS, str(STATUS), "server_error"), last
    else:
        assert last["response"]["status"] == "failed"
    expected = partial_text(failing.received[-1])
    record = the_record(http, "err-resp")
    assert record["status"] == STATUS
    assert expected in orjson.dumps(record["response"]).decode()
    assert "completed" not in orjson.dumps(record["response"].get("status")).decode()


def test_a_messages_stream_that_fails_mid_way_ends_in_anthropics_error_event(
    failing: Fake, http: httpx.Client
) -> None:
    body = {"model": "m", "max_tokens": 8, "stream": True, "messages": MSG}
    answer = http.post("/sessions/err-msg/v1/messages", json=body,
                       headers={"anthropic-version": "2023-06-01"})
    events = sse(answer.text)
    names = [name for name, _ in events]
    assert "message_stop" not in names, names
    assert "end_turn" not in answer.text and '"stop_reason":"max_tokens"' not in answer.text
    assert names[-1] == "error", names
    last = events[-1][1]
    assert last["type"] == "error" and last["error"]["type"] == "api_error"
    shown = "".join(
        data["delta"].get("text", "") for name, data in events
        if name == "content_block_delta" and isinstance(data, dict))
    expected = partial_text(failing.received[-1])
    assert shown == expected
    record = the_record(http, "err-msg")
    assert record["status"] == STATUS
    assert expected in orjson.dumps(record["response"]).decode()


def test_a_token_in_token_out_stream_that_fails_mid_way_ends_in_an_error_with_its_tokens(
    fake: Fake, start_proxy: Callable[..., str]
) -> None:
    base = tito_proxy(start_proxy, fake)
    script = encode("Hello there, my good friend.")
    fake.switches.script = [script]
    fake.switches.error_after = ERROR_AT
    fake.switches.error_status = STATUS
    with httpx.Client(base_url=base, timeout=60) as http:
        answer = http.post("/sessions/err-tito/v1/chat/completions", json=CHAT)
        assert "input_ids" in fake.received[-1] and fake.received[-1]["stream"] is True
        events = sse(answer.text)
        error = openai_error(events)
        assert error["code"] == STATUS, events[-2:]
        assert decode(script[:ERROR_AT]).startswith(chat_text(events))
        record = the_record(http, "err-tito")
    assert record["status"] == STATUS
    assert record["completion_token_ids"] == script[:ERROR_AT]
    assert len(record["logprobs"]) == ERROR_AT


# --- 2. a mid-stream timeout is a 504 on every stream path ------------------------------


def test_a_single_stream_that_stalls_past_the_read_timeout_is_a_504(
    stalling: Fake, start_proxy: Callable[..., str]
) -> None:
    """The reference the other paths must match (passes today)."""
    url = start_proxy([stalling.url], read_timeout_s=READ_TIMEOUT_S, max_failover=0)
    with httpx.Client(base_url=url, timeout=60) as http:
        events = sse(http.post("/sessions/slow-one/v1/chat/completions", json=CHAT).text)
        assert timed_out(openai_error(events)), events[-1]
        assert chat_text(events) == partial_text(stalling.received[-1], 1)
        record = the_record(http, "slow-one")
    assert record["status"] == 504


def test_a_fanned_out_stream_that_stalls_past_the_read_timeout_is_a_504(
    stalling: Fake, start_proxy: Callable[..., str]
) -> None:
    url = start_proxy([stalling.url], read_timeout_s=READ_TIMEOUT_S, max_failover=0)
    with httpx.Client(base_url=url, timeout=60) as http:
        answer = http.post("/sessions/slow-fan/v1/chat/completions", json={**CHAT, "n": 2})
        events = sse(answer.text)
        assert timed_out(openai_error(events)), events[-1]
        record = the_record(http, "slow-fan")
    assert record["status"] == 504


def test_a_token_in_token_out_stream_that_stalls_past_the_read_timeout_is_a_504(
    stalling: Fake, start_proxy: Callable[..., str]
) -> None:
    base = tito_proxy(start_proxy, stalling, read_timeout_s=READ_TIMEOUT_S, max_failover=0)
    script = encode("Hello there, my good friend.")
    stalling.switches.script = [script]
    with httpx.Client(base_url=base, timeout=60) as http:
        events = sse(http.post("/sessions/slow-tito/v1/chat/completions", json=CHAT).text)
        assert timed_out(openai_error(events)), events[-1]
        record = the_record(http, "slow-tito")
    assert record["status"] == 504
    assert record["completion_token_ids"] == script[:1]
