"""Parity with SGLang's own server in token-in-token-out mode (issue 24), through a real
proxy under uvicorn in front of the engine (tiny model), driven over HTTP."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from seedproxy.engine import RunningEngine
from seedproxy.engine.model import default_gguf_path, gguf_tokenizer_dir
from tests.helpers.waiting import HANG_S

pytestmark = pytest.mark.engine

MESSAGES = [{"role": "user", "content": "Say something."}]


@pytest.fixture
def tito(engine: RunningEngine, start_proxy: Callable[..., str]) -> str:
    return start_proxy([engine.url], token_in_token_out=True,
                       tokenizer=str(gguf_tokenizer_dir(default_gguf_path())))


def chat(base: str, path: str = "/v1/chat/completions", **fields: Any) -> httpx.Response:
    body = {"model": "m", "messages": MESSAGES, "max_tokens": 4, **fields}
    return httpx.post(base + path, json=body, timeout=120)


def test_ids_outside_a_session_are_distinct(tito: str) -> None:
    """Two requests outside any session never share an answer id, even with the same
    prompt; in a session the id is the derived one, the same on a replay."""
    first, second = chat(tito), chat(tito, temperature=0.7)
    assert first.status_code == second.status_code == 200, (first.text, second.text)
    ids = {first.json()["id"], second.json()["id"], chat(tito).json()["id"]}
    assert len(ids) == 3 and all(i.startswith("chatcmpl-") for i in ids)
    in_a = chat(tito, "/sessions/ids-a/v1/chat/completions").json()["id"]
    again = httpx.post(tito + "/sessions", json={"identity": "ids-a"}, timeout=30).json()
    replay_id = again["sessions"][0]["session_id"]
    in_b = chat(tito, f"/sessions/{replay_id}/v1/chat/completions").json()["id"]
    assert in_a == in_b and in_a not in ids


def _eot() -> int:
    """SmolLM2's end-of-turn token id, from its tokenizer."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf_tokenizer_dir(default_gguf_path())))
    return int(tokenizer.convert_tokens_to_ids("<|im_end|>"))


def _turn(base: str, session: str) -> dict[str, Any]:
    trajectory = httpx.get(f"{base}/sessions/{session}/trajectory", timeout=30).json()
    return trajectory["interactions"][-1]  # type: ignore[no-any-return]


def test_ignore_eos_generates_past_the_end_of_turn(tito: str, engine: RunningEngine) -> None:
    """A bias that makes the end-of-turn token the likeliest: without ``ignore_eos`` the
    turn ends at once; with it, it runs to ``max_tokens``, token for token what the
    engine's own chat route samples with the same seed."""
    eot = [_eot()]
    bias = {"logit_bias": {str(eot[0]): 100}, "max_tokens": 5}
    stops = chat(tito, "/sessions/eos-off/v1/chat/completions", **bias).json()
    assert stops["choices"][0]["finish_reason"] == "stop"
    assert _turn(tito, "eos-off")["completion_token_ids"] == eot
    runs = chat(tito, "/sessions/eos-on/v1/chat/completions", ignore_eos=True, **bias)
    assert runs.status_code == 200, runs.text
    assert runs.json()["choices"][0]["finish_reason"] == "length"
    turn = _turn(tito, "eos-on")
    assert turn["completion_token_ids"] == eot * 5
    own = httpx.post(engine.url + "/v1/chat/completions", timeout=120, json={
        "model": "m", "messages": MESSAGES, "seed": int(runs.headers["x-seedproxy-seed"]),
        "ignore_eos": True, "return_token_ids": True, **bias}).json()["choices"][0]
    assert own["prompt_token_ids"] == turn["prompt_token_ids"]
    assert own["response_token_ids"] == turn["completion_token_ids"]
    assert own["finish_reason"] == "length"
    bad = chat(tito, ignore_eos="yes")
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "ignore_eos"


def _events(reply: httpx.Response) -> list[dict[str, Any]]:
    lines = [line[6:] for line in reply.text.splitlines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


def test_matched_stop_as_the_engine_chat_route_reports_it(tito: str, engine: RunningEngine
                                                          ) -> None:
    """A turn ended by the end-of-turn token names it in ``matched_stop``, as the
    engine's own chat route does for the same request; a turn cut by ``max_tokens``
    names none. Streamed, the finish chunk carries it."""
    eot = _eot()
    forced = {"logit_bias": {str(eot): 100}, "max_tokens": 5}
    answer = chat(tito, "/sessions/ms-a/v1/chat/completions", **forced).json()["choices"][0]
    seed = int(httpx.get(tito + "/sessions/ms-a/trajectory", timeout=30)
               .json()["interactions"][0]["seed"])
    own = httpx.post(engine.url + "/v1/chat/completions", timeout=120, json={
        "model": "m", "messages": MESSAGES, "seed": seed, **forced}).json()["choices"][0]
    assert answer["matched_stop"] == own["matched_stop"] == eot
    assert answer["finish_reason"] == own["finish_reason"] == "stop"
    cut = chat(tito, "/sessions/ms-b/v1/chat/completions", max_tokens=1, ignore_eos=True)
    assert cut.json()["choices"][0]["matched_stop"] is None
    streamed = _events(chat(tito, "/sessions/ms-c/v1/chat/completions", stream=True, **forced))
    finish = [c["choices"][0] for c in streamed if c["choices"][0]["finish_reason"]]
    assert [(f["finish_reason"], f["matched_stop"]) for f in finish] == [("stop", eot)]


def test_continuous_usage_stats_on_the_stream(tito: str) -> None:
    """Each delta chunk carries the usage so far; without the option none does."""
    options = {"include_usage": True, "continuous_usage_stats": True}
    reply = chat(tito, "/sessions/cu-a/v1/chat/completions", stream=True, max_tokens=6,
                 ignore_eos=True, stream_options=options)
    assert reply.status_code == 200, reply.text
    chunks = _events(reply)
    final = chunks[-1]["usage"]
    assert final["completion_tokens"] == 6
    deltas = [c for c in chunks[1:-1] if c["choices"] and not c["choices"][0]["finish_reason"]]
    assert deltas and all("usage" in c for c in deltas)
    counts = [c["usage"]["completion_tokens"] for c in deltas]
    assert counts == sorted(counts) and 1 <= counts[0] and counts[-1] <= 6
    assert all(c["usage"]["prompt_tokens"] == final["prompt_tokens"] for c in deltas)
    assert all(c["usage"]["total_tokens"] == final["prompt_tokens"] + n
               for c, n in zip(deltas, counts, strict=True))
    plain = _events(chat(tito, "/sessions/cu-b/v1/chat/completions", stream=True,
                         max_tokens=6, ignore_eos=True))
    assert not any("usage" in c for c in plain)


@pytest.mark.parametrize("where", ["engine", "tito"])
def test_every_streamed_delta_carries_reasoning_content(where: str, tito: str,
                                                        engine: RunningEngine) -> None:
    """As SGLang's stream test reads them through the openai SDK: every choice's delta,
    the finish chunk's included, has ``reasoning_content`` (null here) and every
    choice ``matched_stop``."""
    import openai

    base = engine.url if where == "engine" else tito + "/sessions/rc-a"
    client = openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0, timeout=HANG_S)
    stream = client.chat.completions.create(model="m", messages=MESSAGES,  # type: ignore[arg-type]
                                            max_tokens=4, stream=True)
    choices = [c.choices[0] for c in stream if c.choices]
    assert choices[0].delta.role == "assistant" and choices[-1].finish_reason is not None
    for choice in choices:
        assert choice.delta.reasoning_content is None  # type: ignore[attr-defined]
        assert "matched_stop" in choice.model_dump()
    client.close()


def test_server_routes_are_the_engines(engine: RunningEngine,
                                       start_proxy: Callable[..., str]) -> None:
    """In front of the engine, SGLang's server routes answer as the engine does; the
    engine's ``/tokenize`` gives the tokenizer's ids, and ``/detokenize`` reverses it."""
    proxy = start_proxy([engine.url])
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf_tokenizer_dir(default_gguf_path())))
    for path in ("/get_model_info", "/get_server_info", "/health", "/health_generate"):
        ours, theirs = httpx.get(proxy + path, timeout=30), httpx.get(engine.url + path)
        assert ours.status_code == theirs.status_code == 200, path
        assert ours.content == theirs.content or path == "/get_server_info"
    assert httpx.get(proxy + "/get_server_info").json()["model_path"] == \
        httpx.get(engine.url + "/get_server_info").json()["model_path"]
    text = "The sea is wide."
    for path in ("/tokenize", "/v1/tokenize"):
        answer = httpx.post(proxy + path, json={"prompt": text}, timeout=30).json()
        assert answer["tokens"] == tokenizer.encode(text)
        assert answer["count"] == len(answer["tokens"]) and answer["max_model_len"] > 0
    batch = httpx.post(proxy + "/tokenize", json={"prompt": [text, "Hi"],
                                                  "add_special_tokens": False}).json()
    assert batch["tokens"] == [tokenizer.encode(text, add_special_tokens=False),
                               tokenizer.encode("Hi", add_special_tokens=False)]
    assert batch["count"] == [len(t) for t in batch["tokens"]]
    back = httpx.post(proxy + "/detokenize", json={"tokens": batch["tokens"][0]}).json()
    assert back["text"] == text
    bad = httpx.post(proxy + "/tokenize", json={"prompt": 3}, timeout=30)
    assert bad.status_code == 400 and bad.json()["param"] == "prompt"  # SGLang's shape
    assert bad.content == httpx.post(engine.url + "/tokenize", json={"prompt": 3}).content


def test_generate_honours_logprob_start_len_and_text_in_logprobs(
        engine: RunningEngine, start_proxy: Callable[..., str]) -> None:
    """Input logprobs start at ``logprob_start_len`` (the same values as from 0, cut);
    ``return_text_in_logprobs`` fills each row's text slot with its token's text."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf_tokenizer_dir(default_gguf_path())))
    proxy = start_proxy([engine.url])
    prompt = tokenizer.encode("The sea is wide and deep.")
    assert len(prompt) > 4

    def generate(**fields: Any) -> httpx.Response:
        body = {"input_ids": prompt, "return_logprob": True,
                "sampling_params": {"max_new_tokens": 3, "temperature": 0}, **fields}
        return httpx.post(proxy + "/sessions/lp-a/generate", json=body, timeout=120)

    whole = generate(logprob_start_len=0).json()["meta_info"]
    cut = generate(logprob_start_len=3, return_text_in_logprobs=True).json()["meta_info"]
    assert [row[1] for row in whole["input_token_logprobs"]] == prompt
    assert [row[:2] for row in cut["input_token_logprobs"]] == [
        row[:2] for row in whole["input_token_logprobs"][3:]]
    assert all(row[2] is None for row in whole["input_token_logprobs"])
    for row in cut["input_token_logprobs"] + cut["output_token_logprobs"]:
        assert row[2] == tokenizer.decode([row[1]])
    assert [row[:2] for row in cut["output_token_logprobs"]] == [
        row[:2] for row in whole["output_token_logprobs"]]
    over = generate(logprob_start_len=len(prompt))
    assert over.status_code == 400 and "logprob_start_len" in over.text
