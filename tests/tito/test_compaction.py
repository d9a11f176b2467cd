"""Compaction in token-in-token-out mode: a scripted agent that replaces its history with
a summary every 20 turns (marking it with ``x-seedproxy-compacted-from``) leaves one
branch per segment, linked in order, each an exact token sequence; resuming it replays
every turn from the record, lineage included."""

from __future__ import annotations

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
TURNS, EVERY = 50, 20


@pytest.fixture(scope="module")
def encode() -> Callable[[str], list[int]]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(TOKENIZER)
    return lambda text: list(tok.encode(text, add_special_tokens=False)) + [EOT]


def compacting_agent(base: str, session: str) -> list[str]:
    """Every ``EVERY`` turns the history becomes [system, summary], and the request says
    which turn it replaces (the last one answered)."""
    client = openai.OpenAI(base_url=f"{base}/sessions/{session}/v1", api_key="x",
                           max_retries=0)
    system = {"role": "system", "content": "You are a terse agent."}
    messages: list[Any] = [system, {"role": "user", "content": "Start the task."}]
    said, last = [], None
    for turn in range(TURNS):
        headers = {}
        if turn and turn % EVERY == 0:
            messages = [system, {"role": "user",
                                 "content": f"Summary of turns up to {turn - 1}. Go on."}]
            headers = {"x-seedproxy-compacted-from": str(last)}
        raw = client.chat.completions.with_raw_response.create(
            model="m", messages=messages, max_tokens=8, extra_headers=headers)
        last = int(raw.headers["x-seedproxy-request-index"])
        text = raw.parse().choices[0].message.content or ""
        said.append(text)
        messages += [{"role": "assistant", "content": text},
                     {"role": "user", "content": f"Step {turn + 1}."}]
    return said


def test_a_rollout_compacting_every_20_turns_exports_its_segments_in_order(
        fake: Fake, start_proxy: Callable[..., str],
        encode: Callable[[str], list[int]]) -> None:
    base = start_proxy([fake.url], token_in_token_out=True, tokenizer=TOKENIZER,
                       chat_template=TEMPLATE)
    fake.switches.script = [encode(f"Reply {t}.") for t in range(TURNS)]
    said = compacting_agent(base, "long")
    assert said == [f"Reply {t}." for t in range(TURNS)]
    concat = httpx.get(f"{base}/sessions/long/trajectory", params={"style": "concat"},
                       timeout=60).json()
    individual = httpx.get(f"{base}/sessions/long/trajectory", timeout=60).json()
    assert concat["chain"] == ["i0", "i20", "i40"]
    segments = {b["branch_id"]: b for b in concat["branches"]}
    assert [segments[b]["interaction_ids"] for b in concat["chain"]] == [
        [f"i{t}" for t in range(0, 20)], [f"i{t}" for t in range(20, 40)],
        [f"i{t}" for t in range(40, 50)]]
    assert [segments[b]["compacted_from"] for b in concat["chain"]] == [
        None, {"interaction_id": "i19", "branch": "i0"},
        {"interaction_id": "i39", "branch": "i20"}]
    turns = {i["interaction_id"]: i for i in individual["interactions"]}
    for branch_id in concat["chain"]:
        segment = segments[branch_id]
        final = turns[segment["interaction_ids"][-1]]
        assert segment["error"] is None
        assert segment["token_ids"] == (final["prompt_token_ids"]
                                        + final["completion_token_ids"])
        assert sum(segment["loss_mask"]) == sum(
            len(turns[i]["completion_token_ids"]) for i in segment["interaction_ids"])
    assert {k: v["compacted_from"] for k, v in turns.items() if "compacted_from" in v} == {
        "i20": "i19", "i40": "i39"}
    assert {v["branch"] for v in turns.values()} == {"i0", "i20", "i40"}

    # The harness crashed: resuming replays all 50 turns, compactions included.
    httpx.post(f"{base}/sessions", json={"resume": "long"})
    count = len(fake.received)
    assert compacting_agent(base, "long-1") == said
    assert len(fake.received) == count
    again = httpx.get(f"{base}/sessions/long-1/trajectory", params={"style": "concat"},
                      timeout=60).json()
    assert again["chain"] == concat["chain"] and again["branches"] == concat["branches"]

    # A fork at turn 30 replays 30 turns, then samples with its own seeds; its live turns
    # extend the replayed ones exactly (no new branch at the fork point).
    httpx.post(f"{base}/sessions", json={"identity": "long.b",
                                         "fork": {"session": "long", "at": 30}})
    fake.switches.script = [encode(f"Other {t}.") for t in range(30, TURNS)]
    count = len(fake.received)
    forked = compacting_agent(base, "long.b")
    assert forked == said[:30] + [f"Other {t}." for t in range(30, TURNS)]
    live = fake.received[count:]
    assert [r["sampling_params"]["sampling_seed"] for r in live] == [
        derive_seed("long.b", t) for t in range(30, TURNS)]
    branch = httpx.get(f"{base}/sessions/long.b/trajectory", params={"style": "concat"},
                       timeout=60).json()
    assert branch["chain"] == ["i0", "i20", "i40"]
    second = {b["branch_id"]: b for b in branch["branches"]}["i20"]
    assert second["error"] is None
    assert second["interaction_ids"] == [f"i{t}" for t in range(20, 40)]
    source_second = segments["i20"]
    prefix = turns["i29"]["prompt_token_ids"] + turns["i29"]["completion_token_ids"]
    assert second["token_ids"][:len(prefix)] == source_second["token_ids"][:len(prefix)]
    assert second["token_ids"] != source_second["token_ids"]


def test_a_malformed_compaction_header_is_a_400_that_uses_no_index(
        fake: Fake, start_proxy: Callable[..., str]) -> None:
    base = start_proxy([fake.url])
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    bad = httpx.post(f"{base}/sessions/b/v1/chat/completions", json=body,
                     headers={"x-seedproxy-compacted-from": "i19; drop"})
    assert bad.status_code == 400
    assert bad.json()["error"]["param"] == "x-seedproxy-compacted-from"
    good = httpx.post(f"{base}/sessions/b/v1/chat/completions", json=body,
                      headers={"x-seedproxy-compacted-from": "7"})
    assert good.headers["x-seedproxy-request-index"] == "0"
    (recorded,) = httpx.get(f"{base}/sessions/b/trajectory").json()["interactions"]
    assert recorded["compacted_from"] == "i7"
    assert fake.received and len(fake.received) == 1
