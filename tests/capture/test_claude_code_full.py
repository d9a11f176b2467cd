"""Claude Code in its full mode (no ``--bare``: 20-odd tools, the ``Agent`` sub-agent
tool) through seedproxy in token-in-token-out mode, in front of a scripted Qwen3 model
(``tests/helpers/scripted_qwen.py``: the real Qwen3 tokenizer and template). The model
calls Bash, starts a sub-agent, finishes; then ``claude -p --continue "/compact"``
compacts, and one more run calls Bash and finishes.

The export links the sub-agent to its ``Agent`` call and the post-compaction branch to
what it compacted (Claude Code sends no header), its chain follows the main
conversation, every sampled token is in exactly one training sample, and every turn
is extended or matched by a named matcher except the first turn of each branch (where
Claude Code itself changed the conversation). A second session of the same identity
replays the full-mode run with the same seeds and tokens. Four ``claude`` runs in all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("transformers")

from seedproxy import derive_seed  # noqa: E402
from seedproxy.client import Trajectory, to_verl  # noqa: E402
from tests.conftest import Fake  # noqa: E402
from tests.helpers.claude_code import claude_binary, run_claude  # noqa: E402
from tests.helpers.real_tokenizers import family, tokenizer_dir  # noqa: E402
from tests.helpers.scripted_qwen import FINAL, SUBAGENT_PROMPT, AgentScript  # noqa: E402

IDENTITY = "cc-full"
TASK = "Run the marker task."


@pytest.fixture
def script(fake: Fake) -> AgentScript:
    played = AgentScript(family("qwen3"))
    fake.switches.script_stops = True
    fake.switches.responder = played
    return played


@pytest.fixture
def http(fake: Fake, start_proxy: Callable[..., str]) -> Iterator[httpx.Client]:
    base = start_proxy([fake.url], token_in_token_out=True,
                       tokenizer=str(tokenizer_dir("qwen3")), tool_parser="hermes")
    with httpx.Client(base_url=base, timeout=120) as client:
        yield client


def open_session(http: httpx.Client) -> tuple[str, str, str]:
    made = http.post("/sessions", json={"identity": IDENTITY}).json()["sessions"][0]
    return made["session_id"], str(made["base_url"]).removesuffix("/v1"), made["api_key"]


def claude(base: str, key: str, prompt: str, scratch: Path, *extra: str) -> dict[str, Any]:
    """One run with its side requests on (its title request)."""
    return run_claude(claude_binary(), base, key, prompt, scratch, "--allowedTools",
                      "Bash,Agent", *extra, side_requests=True)


def export(http: httpx.Client, session: str, style: str) -> dict[str, Any]:
    got: dict[str, Any] = http.get(f"/sessions/{session}/trajectory",
                                   params={"style": style}).json()
    return got


def called(turn: dict[str, Any]) -> list[dict[str, Any]]:
    return [b for b in turn["response"]["content"] if b["type"] == "tool_use"]


def test_full_mode_with_a_sub_agent_and_a_compaction(
        script: AgentScript, http: httpx.Client, tmp_path: Path) -> None:
    session, base, key = open_session(http)
    first = claude(base, key, TASK, tmp_path / "a")
    assert first["is_error"] is False and first["result"] == FINAL
    done = len(export(http, session, "individual")["interactions"])
    claude(base, key, "/compact", tmp_path / "a", "--continue")
    claude(base, key, "Run the marker task AGAIN.", tmp_path / "a", "--continue")

    turns = {t["interaction_id"]: t for t in export(http, session, "individual")["interactions"]}
    concat = export(http, session, "concat")
    branches = {b["branch_id"]: b for b in concat["branches"]}
    answered = dict((tuple(p), o) for p, o in script.answers)

    # The exported ids are the ids the scripted model returned, turn by turn.
    for turn in turns.values():
        assert answered[tuple(turn["prompt_token_ids"])] == turn["completion_token_ids"]

    # The sub-agent is linked to the Agent call that started it.
    agent = next(t for t in turns.values() if any(c["name"] == "Agent" for c in called(t)))
    call = next(c for c in called(agent) if c["name"] == "Agent")
    assert call["input"]["prompt"] == SUBAGENT_PROMPT
    sub = [b for b in branches.values() if b["subagent_of"] is not None]
    assert [b["subagent_of"] for b in sub] == [
        {"interaction_id": agent["interaction_id"], "tool_call_id": call["id"]}]
    assert turns[sub[0]["interaction_ids"][0]]["response"]["content"][0]["text"] == "ready"

    # The post-compaction branch names what it compacted; the chain follows the main
    # conversation: the branch before the compaction, then the one after.
    before = agent["branch"]
    assert before != "i0" and branches[before]["interaction_ids"][0] != "i0"
    after = [b for b in branches.values() if b["compacted_from"] is not None]
    assert len(after) == 1
    summary = after[0]["compacted_from"]["summary"]
    assert "<summary>" in "".join(
        b.get("text", "") for b in turns[summary]["response"]["content"])
    assert after[0]["compacted_from"]["branch"] == before
    assert after[0]["compacted_from"]["interaction_id"] in branches[before]["interaction_ids"]
    assert int(summary.removeprefix("i")) >= done  # asked for by the /compact run
    assert concat["chain"] == [before, after[0]["branch_id"]]
    assert [b["branch_id"] for b in branches.values() if b["main"]] == concat["chain"]
    assert concat["interaction_ids"] == branches[before]["interaction_ids"]

    # Every sampled token is in exactly one sample, with loss mask 1.
    owner = [iid for b in branches.values() for iid in b["interaction_ids"]]
    assert sorted(owner) == sorted(turns)
    for b in branches.values():
        sampled = [t for t, m in zip(b["token_ids"], b["loss_mask"], strict=True) if m]
        assert sampled == [t for iid in b["interaction_ids"]
                           for t in turns[iid]["completion_token_ids"]]

    # Each turn is matched (Claude Code resends tool_use input re-serialised, and the
    # call ids as the Messages API shows them), but where Claude Code started a new
    # conversation (the first turn, the sub-agent, the history after the compaction):
    # those are rendered. The summary request continues the turn before the last answer
    # (a second continuation of it: its own branch).
    kinds = {iid: t["lineage"]["prompt"] for iid, t in turns.items()}
    rendered = sorted(iid for iid, k in kinds.items() if k["kind"] == "rendered")
    assert rendered == sorted(["i0", before, sub[0]["branch_id"], after[0]["branch_id"]]), kinds
    assert {kinds[iid]["reason"]["what"] for iid in rendered} == {
        "first turn", "a new conversation: its first message opens no recorded turn"}
    assert all(k == {"kind": "matched", "matchers": ["harness_metadata", "tool_arguments_json"]}
               for iid, k in kinds.items() if iid not in rendered)
    assert branches[summary]["parent"]["branch"] == before
    counts = concat["tito_prompts"]
    assert counts == {"extended": 0, "rendered": 4, "unknown": 0, "matched": {
        "total": len(turns) - 4,
        "by_matcher": {"harness_metadata": len(turns) - 4,
                       "tool_arguments_json": len(turns) - 4}}}

    # Its title request (index 0, no tools) is a side request, never the chain's head.
    title = branches["i0"]
    assert title["interaction_ids"] == ["i0"] and not turns["i0"]["request"].get("tools")
    assert title["side_request"] is True and title["main"] is False
    metrics = http.get("/metrics").text
    assert ('seedproxy_tito_prompts_total{kind="matched",matcher="tool_arguments_json"} '
            f'{float(counts["matched"]["total"])}') in metrics

    # The converters take one row per branch, links included.
    rows = to_verl([Trajectory.from_json(concat)])
    assert [r["extra_fields"]["branch_id"] for r in rows] == list(branches)
    assert [r["extra_fields"]["subagent_of"] for r in rows] == [
        b["subagent_of"] for b in branches.values()]

    # A second session of the same identity replays the full-mode run: same seeds,
    # same tokens, request by request.
    again, base2, key2 = open_session(http)
    assert again != session
    claude(base2, key2, TASK, tmp_path / "b")
    replayed = export(http, again, "individual")["interactions"]
    assert len(replayed) == done
    for turn in replayed:
        assert turn["seed"] == derive_seed(IDENTITY, turn["request_index"])
        original = turns[turn["interaction_id"]]
        assert turn["seed"] == original["seed"]
        assert turn["completion_token_ids"] == original["completion_token_ids"]
