"""A chat harness's session as a tree, inferred with no header from the harness: a
title request beside the main loop (``side_request``), a sub-agent started by a tool
call (``subagent_of``), a compaction whose new history opens with the summary the model
wrote (``compacted_from``), and the main conversation (``main``, the ``chain``). The
export gives one training sample per branch, every sampled token in exactly one, in a
fixed order, and the converters carry the links."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

pytest.importorskip("transformers")

from seedproxy.client import Trajectory, to_slime  # noqa: E402
from tests.conftest import Fake  # noqa: E402
from tests.helpers.real_tokenizers import family, tokenizer_dir  # noqa: E402
from tests.helpers.scripted_qwen import qwen3_ids  # noqa: E402

TOOLS = [{"type": "function", "function": {
    "name": "task", "description": "Start a sub-agent.",
    "parameters": {"type": "object", "properties": {"prompt": {"type": "string"}}}}}]
SUB = "Count to three."
SUMMARY = "The sub-agent counted to three."
SYSTEM = {"role": "system", "content": "You are the main agent."}


def chat(base: str, messages: list[dict[str, Any]], tools: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "m", "messages": messages, "max_tokens": 64}
    if tools:
        body["tools"] = TOOLS
    answer = httpx.post(f"{base}/sessions/tree/v1/chat/completions", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    message: dict[str, Any] = answer.json()["choices"][0]["message"]
    return message


def test_links_main_chain_and_one_sample_per_branch(
        fake: Fake, start_proxy: Callable[..., str]) -> None:
    tok = family("qwen3")
    fake.switches.script_stops = True
    fake.switches.script = [qwen3_ids(tok, text) for text in [
        "Counting task",
        '<tool_call>\n{"name": "task", "arguments": {"prompt": "' + SUB + '"}}\n</tool_call>',
        "One, two, three.", "It counted.", f"<summary>{SUMMARY}</summary>", "Done."]]
    base = start_proxy([fake.url], token_in_token_out=True,
                       tokenizer=str(tokenizer_dir("qwen3")), tool_parser="hermes")
    task = [SYSTEM, {"role": "user", "content": "Have a sub-agent count."}]
    chat(base, [{"role": "user", "content": "Title this: counting"}], tools=False)  # i0
    call = chat(base, task)  # i1
    chat(base, [{"role": "system", "content": "You are a sub-agent."},
                {"role": "user", "content": SUB}])  # i2
    result = {"role": "tool", "tool_call_id": call["tool_calls"][0]["id"],
              "content": "One, two, three."}
    said = chat(base, [*task, call, result])  # i3
    chat(base, [*task, call, result, said, {"role": "user", "content": "Summarise."}])  # i4
    chat(base, [SYSTEM, {"role": "user", "content": f"Earlier: {SUMMARY} Go on."}])  # i5

    got = httpx.get(f"{base}/sessions/tree/trajectory", params={"style": "concat"},
                    timeout=60).json()
    turns = {t["interaction_id"]: t for t in httpx.get(
        f"{base}/sessions/tree/trajectory", timeout=60).json()["interactions"]}
    links = [{k: b[k] for k in ("branch_id", "interaction_ids", "compacted_from",
                                "subagent_of", "side_request", "main")}
             for b in got["branches"]]
    assert links == [
        {"branch_id": "i0", "interaction_ids": ["i0"], "compacted_from": None,
         "subagent_of": None, "side_request": True, "main": False},
        {"branch_id": "i1", "interaction_ids": ["i1", "i3", "i4"], "compacted_from": None,
         "subagent_of": None, "side_request": False, "main": True},
        {"branch_id": "i2", "interaction_ids": ["i2"], "compacted_from": None,
         "subagent_of": {"interaction_id": "i1",
                         "tool_call_id": call["tool_calls"][0]["id"]},
         "side_request": False, "main": False},
        {"branch_id": "i5", "interaction_ids": ["i5"],
         "compacted_from": {"interaction_id": "i4", "branch": "i1", "summary": "i4"},
         "subagent_of": None, "side_request": False, "main": True}]
    assert got["chain"] == ["i1", "i5"] and got["interaction_ids"] == ["i1", "i3", "i4"]
    for branch in got["branches"]:
        sampled = [t for t, m in zip(branch["token_ids"], branch["loss_mask"], strict=True)
                   if m]
        assert sampled == [t for iid in branch["interaction_ids"]
                           for t in turns[iid]["completion_token_ids"]]
    assert sum(sum(b["loss_mask"]) for b in got["branches"]) == sum(
        len(t["completion_token_ids"]) for t in turns.values())
    rows = to_slime([Trajectory.from_json(got)])
    assert [(r["metadata"]["branch_id"], r["metadata"]["main"], r["metadata"]["side_request"])
            for r in rows] == [("i0", False, True), ("i1", True, False), ("i2", False, False),
                               ("i5", True, False)]
    assert rows[2]["metadata"]["subagent_of"] == links[2]["subagent_of"]
