"""Token in, token out against the engine (tiny model): a 5-turn tool-using agent
through the openai SDK, with a Qwen3-style template (reasoning stripped from history,
tools in the system prompt) applied to SmolLM2's tokenizer."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from seedproxy.commands.cli import main
from seedproxy.engine import RunningEngine
from seedproxy.engine.model import default_gguf_path, gguf_tokenizer_dir

TEMPLATE = str(Path(__file__).parents[1] / "helpers" / "qwen3_style.jinja")
TOOLS = [{"type": "function", "function": {
    "name": "lookup", "description": "Look a word up",
    "parameters": {"type": "object", "properties": {"word": {"type": "string"}}}}}]
START = [
    {"role": "system", "content": "You are an agent. Use tools."},
    {"role": "user", "content": "Find the meaning of 'sea'."},
    {"role": "assistant", "content": "", "reasoning_content": "I should look it up.",
     "tool_calls": [{"id": "call_a", "type": "function",
                     "function": {"name": "lookup", "arguments": "{\"word\": \"sea\"}"}}]},
    {"role": "tool", "tool_call_id": "call_a", "content": "a large body of salt water"},
]


@pytest.fixture
def tito_proxy(engine: RunningEngine, start_proxy: Callable[..., str]) -> str:
    return start_proxy(
        [engine.url], token_in_token_out=True,
        tokenizer=str(gguf_tokenizer_dir(default_gguf_path())), chat_template=TEMPLATE,
        tool_parser="hermes", reasoning_parser="think",
    )


@pytest.fixture
def plain_proxy(engine: RunningEngine, start_proxy: Callable[..., str]) -> str:
    return start_proxy([engine.url])


@pytest.fixture
def admin_for() -> Iterator[Callable[[str], httpx.Client]]:
    clients: list[httpx.Client] = []

    def make(url: str) -> httpx.Client:
        clients.append(httpx.Client(base_url=url, timeout=120))
        return clients[-1]

    yield make
    for c in clients:
        c.close()


def run_agent(base: str, session: str, *, stream: bool = False, turns: int = 5,
              edit_at: int | None = None, temperature: float | None = None
              ) -> list[dict[str, Any]]:
    """The agent loop: send, append the reply as the SDK returns it, add a tool
    result (or a user nudge), repeat."""
    client = openai.OpenAI(base_url=f"{base}/sessions/{session}/v1", api_key="x",
                           max_retries=0, timeout=120)
    messages: list[dict[str, Any]] = [dict(m) for m in START]
    replies = []
    for k in range(turns):
        if edit_at is not None and k == edit_at:
            messages[1] = {"role": "user", "content": "Find the meaning of 'ocean'."}
        kwargs: dict[str, Any] = {"model": "m", "messages": messages, "tools": TOOLS,
                                  "max_tokens": 6}
        if temperature is not None:
            kwargs["temperature"] = temperature
        if stream:
            message = _streamed(client, kwargs)
        else:
            message = client.chat.completions.create(**kwargs).choices[0].message.model_dump(
                exclude_none=True)
        replies.append(message)
        sent = {k: v for k, v in message.items() if k != "reasoning_content"}
        messages.append(sent)
        for call in message.get("tool_calls") or []:
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": "ok"})
        if not message.get("tool_calls"):
            messages.append({"role": "user", "content": f"Keep going ({k})."})
    client.close()
    return replies


def _streamed(client: openai.OpenAI, kwargs: dict[str, Any]) -> dict[str, Any]:
    content, reasoning = "", ""
    for chunk in client.chat.completions.create(stream=True, **kwargs):
        for choice in chunk.choices:
            content += choice.delta.content or ""
            reasoning += getattr(choice.delta, "reasoning_content", None) or ""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning:
        message["reasoning_content"] = reasoning
    return message


def trajectory(admin: httpx.Client, session: str, style: str = "individual") -> dict[str, Any]:
    reply = admin.get(f"/sessions/{session}/trajectory", params={"style": style})
    assert reply.status_code == 200, reply.text
    data: dict[str, Any] = reply.json()
    return data


def test_a_tokenizer_or_template_that_cannot_work_is_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["serve", "--upstream", "http://127.0.0.1:9", "--token-in-token-out",
            "--port", "0"]
    assert main([*base, "--tokenizer", str(tmp_path / "missing")]) == 2
    assert "tokenizer not found" in capsys.readouterr().err
    bad = tmp_path / "bad.jinja"  # renders the last message only: history is rewritten
    bad.write_text("{{ messages[-1].content }}<|im_end|>")
    tok = str(gguf_tokenizer_dir(default_gguf_path()))
    assert main([*base, "--tokenizer", tok, "--chat-template", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "template" in err


def test_passthrough_concat_reports_drift(plain_proxy: str, admin_for: Any) -> None:
    run_agent(plain_proxy, "drift")
    joined = trajectory(admin_for(plain_proxy), "drift", "concat")
    assert joined["concat_error"] is not None
    assert joined["concat_error"]["reason"] == "prompt does not extend the previous turn"


def test_every_prompt_extends_the_previous_prompt_and_completion(
        tito_proxy: str, admin_for: Any, engine: RunningEngine) -> None:
    run_agent(tito_proxy, "exact")
    admin = admin_for(tito_proxy)
    turns = trajectory(admin, "exact")["interactions"]
    assert len(turns) == 5
    for before, after in zip(turns, turns[1:], strict=False):
        head = before["prompt_token_ids"] + before["completion_token_ids"]
        assert after["prompt_token_ids"][: len(head)] == head
        assert after["lineage"]["extends"] == {"interaction_id": before["interaction_id"],
                                               "choice": 0}
    assert {t["branch"] for t in turns} == {"i0"}
    joined = trajectory(admin, "exact", "concat")
    assert joined["concat_error"] is None and len(joined["branches"]) == 1
    last = turns[-1]
    assert joined["token_ids"] == last["prompt_token_ids"] + last["completion_token_ids"]
    assert sum(joined["loss_mask"]) == sum(len(t["completion_token_ids"]) for t in turns)
    # Teacher forcing the whole sequence reproduces every sampled logprob exactly.
    forced = httpx.post(f"{engine.url}/generate", timeout=120, json={
        "input_ids": joined["token_ids"], "return_logprob": True, "logprob_start_len": 0,
        "sampling_params": {"max_new_tokens": 0}}).json()
    recomputed = [e[0] for e in forced["meta_info"]["input_token_logprobs"]]
    import array
    sampled = [(i, lp) for i, (m, lp) in enumerate(zip(joined["loss_mask"],
                                                       joined["logprobs"], strict=True)) if m]
    assert sampled
    for position, logprob in sampled:
        assert array.array("f", [recomputed[position]])[0] == logprob, position
    assert main(["verify-logprobs", "--url", tito_proxy, "--engine", engine.url,
                 "--session", "exact"]) == 0


def test_a_rerun_with_the_same_identity_is_byte_identical(tito_proxy: str,
                                                          admin_for: Any) -> None:
    admin = admin_for(tito_proxy)
    ids = []
    for _ in range(2):
        made = admin.post("/sessions", json={"identity": "rerun"}).json()["sessions"][0]
        run_agent(tito_proxy, made["session_id"], turns=3)
        ids.append(made["session_id"])
    first, second = (trajectory(admin, s)["interactions"] for s in ids)
    for turn in first + second:
        turn.pop("latency_ms")
        turn["response"].pop("created")
    assert first == second


def test_streaming_and_whole_answers_agree_token_for_token(tito_proxy: str,
                                                          admin_for: Any) -> None:
    admin = admin_for(tito_proxy)
    made = [admin.post("/sessions", json={"identity": "same"}).json()["sessions"][0]["session_id"]
            for _ in range(2)]
    whole = run_agent(tito_proxy, made[0], turns=3)
    streamed = run_agent(tito_proxy, made[1], turns=3, stream=True)
    assert [m.get("content") or "" for m in whole] == [m["content"] for m in streamed]
    a, b = (trajectory(admin, s)["interactions"] for s in made)
    assert [t["completion_token_ids"] for t in a] == [t["completion_token_ids"] for t in b]
    assert [t["prompt_token_ids"] for t in a] == [t["prompt_token_ids"] for t in b]
    assert [t["logprobs"] for t in a] == [t["logprobs"] for t in b]


def test_an_edited_history_starts_a_branch(tito_proxy: str, admin_for: Any) -> None:
    run_agent(tito_proxy, "edit", turns=4, edit_at=2)
    admin = admin_for(tito_proxy)
    turns = trajectory(admin, "edit")["interactions"]
    assert [t["branch"] for t in turns] == ["i0", "i0", "i2", "i2"]
    assert turns[2]["lineage"] == {
        "extends": None, "forked_from": {"interaction_id": "i1", "messages": 1},
        "prompt": {"kind": "rendered", "reason": turns[2]["lineage"]["prompt"]["reason"]}}
    assert turns[2]["lineage"]["prompt"]["reason"] == {
        "message": 1, "what": "the user message changed"}
    assert [t["lineage"]["prompt"]["kind"] == "rendered" for t in turns] == [
        True, False, True, False]
    joined = trajectory(admin, "edit", "concat")
    assert [b["branch_id"] for b in joined["branches"]] == ["i0", "i2"]
    assert joined["branches"][1]["parent"]["interaction_id"] == "i1"
    for branch in joined["branches"]:
        assert branch["error"] is None
        members = [t for t in turns if t["branch"] == branch["branch_id"]]
        last = members[-1]
        assert branch["token_ids"] == last["prompt_token_ids"] + last["completion_token_ids"]


def test_verify_logprobs_checks_each_turn_at_its_temperature(
        tito_proxy: str, engine: RunningEngine, capsys: pytest.CaptureFixture[str]) -> None:
    run_agent(tito_proxy, "warm", turns=3, temperature=0.7)
    args = ["verify-logprobs", "--url", tito_proxy, "--engine", engine.url, "--session", "warm"]
    assert main(args) == 0
    assert "match, max |diff| 0" in capsys.readouterr().out


@pytest.mark.parametrize("stream", [False, True])
def test_verify_replays_a_token_in_token_out_agent_exactly(
        tito_proxy: str, admin_for: Any, stream: bool) -> None:
    """The replay sends each turn's recorded prompt ids to /generate with its seed and
    sampling fields: a 4-turn tool-using agent at temperature 0.7 verifies, every
    token and logprob identical (the chat route would re-render and drift)."""
    session = f"replay-{stream}"
    run_agent(tito_proxy, session, stream=stream, turns=4, temperature=0.7)
    admin = admin_for(tito_proxy)
    report = admin.post(f"/sessions/{session}/verify")
    assert report.status_code == 200, report.text
    assert report.json() == {"session_id": session, "ok": True, "checked": 4, "skipped": 0,
                             "first_divergence": None}


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_messages_go_through_token_in_token_out_too(
        tito_proxy: str, admin_for: Any, stream: bool) -> None:
    """A Messages conversation is rendered here and sent as token ids: the second
    turn's prompt extends the first's prompt + completion exactly."""
    anthropic = pytest.importorskip("anthropic")
    session = f"msg-tito-{stream}"
    client = anthropic.Anthropic(base_url=f"{tito_proxy}/sessions/{session}", api_key="x",
                                 max_retries=0)
    history: list[dict[str, Any]] = [{"role": "user", "content": "Say hello."}]
    for turn in range(2):
        kwargs: dict[str, Any] = {"model": "m", "max_tokens": 8, "messages": history}
        if stream:
            with client.messages.stream(**kwargs) as events:
                message = events.get_final_message()
        else:
            message = client.messages.create(**kwargs)
        text = "".join(b.text for b in message.content if b.type == "text")
        history += [{"role": "assistant", "content": text or " "},
                    {"role": "user", "content": f"Again {turn}."}]
    turns = trajectory(admin_for(tito_proxy), session)["interactions"]
    assert [t["endpoint"] for t in turns] == ["/v1/messages"] * 2
    first, second = turns
    assert first["response"]["type"] == "message" and first["lineage"]["extends"] is None
    head = first["prompt_token_ids"] + first["completion_token_ids"]
    assert first["response"]["content"][0]["text"].strip()  # this seed's reply is text
    assert second["prompt_token_ids"][: len(head)] == head
    assert second["lineage"]["extends"]["interaction_id"] == first["interaction_id"]
    report = admin_for(tito_proxy).post(f"/sessions/{session}/verify").json()
    assert (report["ok"], report["checked"]) == (True, 2), report
