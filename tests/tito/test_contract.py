"""The contract's seed rules and the session stores in token-in-token-out mode,
against the fake SGLang's /generate (scripted ids from SmolLM2's tokenizer)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

pytest.importorskip("transformers")

from seedproxy import derive_seed  # noqa: E402
from seedproxy.engine.model import default_gguf_path, gguf_tokenizer_dir  # noqa: E402
from tests.conftest import Fake  # noqa: E402

TEMPLATE = str(Path(__file__).parents[1] / "helpers" / "qwen3_style.jinja")
TOKENIZER = str(gguf_tokenizer_dir(default_gguf_path()))
EOT = 2  # <|im_end|> in SmolLM2's vocabulary


def tito(start_proxy: Callable[..., str], fake: Fake, **extra: Any) -> str:
    return start_proxy([fake.url], token_in_token_out=True, tokenizer=TOKENIZER,
                       chat_template=TEMPLATE, tool_parser="hermes", reasoning_parser="think",
                       **extra)


def generated(fake: Fake) -> list[dict[str, Any]]:
    return [r for r in fake.received if "input_ids" in r]


def test_n_choices_pinned_indices_and_retries_keep_the_seed_rules(
        fake: Fake, start_proxy: Callable[..., str], encode: Callable[[str], list[int]]) -> None:
    base = tito(start_proxy, fake)
    fake.switches.script = [encode("one"), encode("two"), encode("three"), encode("four"),
                            encode("four")]
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(base_url=f"{base}/sessions/s", timeout=60) as http:
        both = http.post("/v1/chat/completions", json={**body, "n": 2})
        assert both.headers["x-seedproxy-seed"] == (
            f"{derive_seed('s', 0)},{derive_seed('s:0', 1)}")
        assert [c["message"]["content"] for c in both.json()["choices"]] == ["one", "two"]
        pinned = http.post("/v1/chat/completions", json=body, headers={"x-request-index": "7"})
        assert pinned.headers["x-seedproxy-seed"] == str(derive_seed("s", 7))
        first = http.post("/v1/chat/completions", json=body)
        retry = http.post("/v1/chat/completions", json=body,
                          headers={"x-stainless-retry-count": "1"})
        assert first.headers["x-seedproxy-request-index"] == "1"
        assert retry.headers["x-seedproxy-request-index"] == "1"
        bad = http.post("/v1/chat/completions",
                        json={"model": "m", "messages": [{"role": "robot", "content": "x"}]})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "messages"
        state = httpx.get(f"{base}/sessions/s").json()
    assert state["next_index"] == 2 and state["interactions"] == 3
    seeds = [r["sampling_params"]["sampling_seed"] for r in generated(fake)]
    assert seeds == [derive_seed("s", 0), derive_seed("s:0", 1), derive_seed("s", 7),
                     derive_seed("s", 1), derive_seed("s", 1)]


@pytest.mark.parametrize("store", ["memory", "sqlite", "redis"])
def test_the_previous_turn_lives_in_the_store(
        store: str, fake: Fake, start_proxy: Callable[..., str], tmp_path: Path,
        encode: Callable[[str], list[int]], request: pytest.FixtureRequest) -> None:
    url = {"memory": "memory://", "sqlite": f"sqlite:///{tmp_path / 's.db'}"}.get(store)
    if url is None:
        url = request.getfixturevalue("redis_url")
    base = tito(start_proxy, fake, store=url)
    first, second = encode("<think>hm</think>\n\nHello there."), encode("Bye.")
    fake.switches.script = [first, second]
    client = openai.OpenAI(base_url=f"{base}/sessions/st/v1", api_key="x", max_retries=0)
    messages: list[Any] = [{"role": "user", "content": "hi"}]
    reply = client.chat.completions.create(model="m", messages=messages).choices[0].message
    assert reply.content == "Hello there."
    messages += [{"role": "assistant", "content": " Hello there.\n"},  # re-sent, reformatted
                 {"role": "user", "content": "bye"}]
    client.chat.completions.create(model="m", messages=messages)
    sent = generated(fake)
    head = sent[0]["input_ids"] + first
    assert sent[1]["input_ids"][: len(head)] == head
    turns = httpx.get(f"{base}/sessions/st/trajectory").json()["interactions"]
    assert turns[1]["lineage"]["extends"] == {"interaction_id": "i0", "choice": 0}


def test_responses_extend_the_previous_turn_too(
        fake: Fake, start_proxy: Callable[..., str], encode: Callable[[str], list[int]]) -> None:
    base = tito(start_proxy, fake)
    fake.switches.script = [encode("Paris."), encode("Lyon.")]
    client = openai.OpenAI(base_url=f"{base}/sessions/r/v1", api_key="x", max_retries=0)
    first = client.responses.create(model="m", input="Capital of France?")
    assert first.output_text == "Paris."
    items: list[Any] = [{"role": "user", "content": "Capital of France?"},
                        *[o.model_dump(exclude_none=True) for o in first.output],
                        {"role": "user", "content": "Second city?"}]
    with client.responses.stream(model="m", input=items) as stream:
        text = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
    assert text == "Lyon."
    turns = httpx.get(f"{base}/sessions/r/trajectory").json()["interactions"]
    assert turns[1]["lineage"]["extends"] == {"interaction_id": "i0", "choice": 0}
    assert turns[1]["completion_token_ids"] == encode("Lyon.")


def test_vllm_gets_token_prompts_on_completions(start_proxy: Callable[..., str]) -> None:
    from tests.helpers.fake_compat import CompatSwitches, create_fake_vllm
    from tests.helpers.servers import ServerThread

    switches = CompatSwitches()
    with ServerThread(create_fake_vllm(switches)) as upstream:
        base = start_proxy([upstream.url], backend="vllm", token_in_token_out=True,
                           tokenizer=TOKENIZER, chat_template=TEMPLATE)
        client = openai.OpenAI(base_url=f"{base}/sessions/v/v1", api_key="x", max_retries=0)
        messages: list[Any] = [{"role": "user", "content": "hi"}]
        reply = client.chat.completions.create(model="m", messages=messages, max_tokens=4)
        assert reply.usage is not None and reply.usage.completion_tokens == 4
        messages += [reply.choices[0].message.model_dump(exclude_none=True),
                     {"role": "user", "content": "more"}]
        client.chat.completions.create(model="m", messages=messages, max_tokens=4)
    sent = [r for r in switches.received if isinstance(r.get("prompt"), list)]
    assert [r["seed"] for r in sent] == [derive_seed("v", 0), derive_seed("v", 1)]
    assert all(r["return_token_ids"] is True for r in sent)
    turns = httpx.get(f"{base}/sessions/v/trajectory").json()["interactions"]
    head = turns[0]["prompt_token_ids"] + turns[0]["completion_token_ids"]
    assert sent[1]["prompt"][: len(head)] == head
    assert turns[1]["lineage"]["extends"] == {"interaction_id": "i0", "choice": 0}


def test_a_client_that_leaves_mid_stream_is_recorded_as_abandoned(
        fake: Fake, start_proxy: Callable[..., str], encode: Callable[[str], list[int]]) -> None:
    base = tito(start_proxy, fake)
    script = encode(" ".join(f"w{i}" for i in range(40)))
    fake.switches.script = [script]
    fake.switches.token_delay_s = 0.05
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    with httpx.Client(timeout=60) as http:
        with http.stream("POST", f"{base}/sessions/gone/v1/chat/completions", json=body) as r:
            for line in r.iter_lines():
                if line.startswith("data: ") and '"content":"w' in line:
                    break  # one token seen: leave
        turns: list[Any] = []
        for _ in range(600):  # wait for the record (the proxy notices the disconnect)
            turns = http.get(f"{base}/sessions/gone/trajectory").json()["interactions"]
            if turns:
                break
            time.sleep(0.05)
    assert turns and turns[0]["status"] == 499
    done = turns[0]["completion_token_ids"]
    assert 0 < len(done) < len(script) and script[: len(done)] == done


def test_without_determinism_n_choices_carry_no_seed(
        fake: Fake, start_proxy: Callable[..., str], encode: Callable[[str], list[int]]) -> None:
    base = tito(start_proxy, fake, deterministic=False)
    fake.switches.script = [encode("a"), encode("b")]
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "n": 2}
    answer = httpx.post(f"{base}/sessions/nd/v1/chat/completions", json=body, timeout=60).json()
    assert [c["message"]["content"] for c in answer["choices"]] == ["a", "b"]
    assert all("sampling_seed" not in r["sampling_params"] for r in generated(fake))


@pytest.mark.parametrize("stream", [False, True])
def test_the_weight_versions_of_the_token_prompt_answer_are_recorded(
        fake: Fake, start_proxy: Callable[..., str], stream: bool) -> None:
    base = tito(start_proxy, fake)
    fake.switches.control.version = "step-7"  # as /update_weight_version sets it
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
            "stream": stream}
    with httpx.stream("POST", f"{base}/sessions/wv/v1/chat/completions", json=body,
                      timeout=60) as reply:
        assert reply.status_code == 200
        reply.read()
    record = httpx.get(f"{base}/sessions/wv/trajectory").json()["interactions"][0]
    assert record["weight_version"] == "step-7"
    assert record["weight_versions"] == [
        {"version": "step-7", "start": 0, "end": len(record["completion_token_ids"])}]
