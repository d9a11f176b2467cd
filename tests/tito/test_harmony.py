"""gpt-oss (harmony) in token-in-token-out mode, with its real tokenizer (``quicktok``'s
o200k + ``o200k_harmony.special``) and its public chat template, through the proxy in
front of the fake SGLang scripted with the ids the model emits and stopping at the
first stop id, as SGLang does.

Harmony ends a message with ``<|end|>`` and the turn with ``<|return|>`` (an answer) or
``<|call|>`` (a tool call): only those two stop. Every turn's prompt is the previous
prompt + the completion exactly as sampled + the new messages as the template writes
them; turn 0 equals ``apply_chat_template`` with the same kwargs and the pinned date.
The parsers (``--reasoning-parser gpt-oss``, ``--tool-parser gpt-oss``) give what
SGLang 0.5.23's GptOssDetector classes give on the same text (pinned below from
running them on it)."""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("transformers")
pytest.importorskip("quicktok")

from seedproxy.errors import ConfigError  # noqa: E402
from seedproxy.tito.reasoning import REASONING_PARSERS, Held  # noqa: E402
from seedproxy.tito.renderer import Renderer  # noqa: E402
from seedproxy.tito.template_check import check  # noqa: E402
from seedproxy.tito.tool_parsers import TOOL_PARSERS  # noqa: E402
from tests.conftest import Fake  # noqa: E402
from tests.helpers.real_tokenizers import template_path, tokenizer_dir  # noqa: E402
from tests.tito.test_real_families import TOOLS, ids, post, prompts, tok_of  # noqa: E402

NAME = "gpt-oss"
DAY = datetime.date(2024, 7, 26)
ANALYSIS = "<|channel|>analysis<|message|>{}<|end|><|start|>assistant"
FINAL = "<|channel|>final<|message|>{}<|return|>"
CALL = ("<|channel|>commentary to=functions.lookup <|constrain|>json<|message|>{}"
        "<|call|>")
PREAMBLE = "<|channel|>commentary<|message|>{}<|end|><|start|>assistant"


def tok() -> Any:
    return tok_of(NAME)


def token(text: str) -> int:
    (only,) = ids(tok(), text)
    return only


def dated_template() -> str:
    """The template with the date written in (what apply_chat_template renders on DAY)."""
    text = template_path(NAME).read_text(encoding="utf-8")
    assert text.count('strftime_now("%Y-%m-%d")') == 1
    return text.replace('strftime_now("%Y-%m-%d")', f'"{DAY.isoformat()}"')


def expected_first(messages: list[dict[str, Any]], **kwargs: Any) -> list[int]:
    text = tok().apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                     chat_template=dated_template(), **kwargs)
    return ids(tok(), text)


def emitted(text: str) -> list[int]:
    """What the model samples: the turn (its stop id included), then what it would go
    on with; the upstream stops at the first stop id."""
    return ids(tok(), text) + ids(tok(), "<|start|>assistant<|channel|>final<|message|>more")


def start(start_proxy: Callable[..., str], fake: Fake, **settings: Any) -> str:
    fake.switches.script_stops = True
    return start_proxy([fake.url], token_in_token_out=True,
                       tokenizer=str(tokenizer_dir(NAME)), template_date=DAY,
                       tool_parser="gpt-oss", reasoning_parser="gpt-oss", **settings)


def completions(base: str, session: str) -> list[list[int]]:
    got = httpx.get(f"{base}/sessions/{session}/trajectory", timeout=60).json()
    return [i["completion_token_ids"] for i in got["interactions"]]


def assert_chain(sent: list[list[int]], sampled: list[list[int]]) -> None:
    for k in range(1, len(sent)):
        before = sent[k - 1] + sampled[k - 1]
        assert sent[k][:len(before)] == before, f"turn {k} does not extend turn {k - 1}"
        assert len(sent[k]) > len(before)


# 1. the start-up check, both ways; the stop ids

def test_the_start_up_check_accepts_harmony_and_stops_on_return_and_call_only() -> None:
    renderer = Renderer(tok())
    check(renderer)
    assert renderer.stop_token_ids == (token("<|return|>"), token("<|call|>"))
    assert token("<|end|>") not in renderer.stop_token_ids


def _broken(old: str, new: str) -> str:
    text = template_path(NAME).read_text(encoding="utf-8")
    assert text.count(old) == 1
    return text.replace(old, new)


def test_a_harmony_template_that_rewrites_an_earlier_turn_is_still_refused() -> None:
    """Marking only the latest user message renders turn 0 differently once it is
    history: appending to the recorded prompt would not be what the template writes."""
    line = '{{- "<|start|>user<|message|>" + message.content + "<|end|>" }}'
    broken = _broken(line, "{%- if loop.last %}{{- '(latest) ' }}{%- endif %}" + line)
    with pytest.raises(ConfigError) as refused:
        check(Renderer(tok(), broken))
    message = str(refused.value)
    assert "\n" not in message
    assert "the assistant turn is not the prompt + the reply" in message, message


def test_a_harmony_template_whose_call_does_not_end_the_turn_is_refused() -> None:
    """A call written as ending with ``<|end|>``: the sampled ``<|call|>`` would not be
    followed by what the template writes after a call."""
    broken = _broken('{{- "<|call|>" }}', '{{- "<|end|>" }}')
    with pytest.raises(ConfigError) as refused:
        check(Renderer(tok(), broken))
    message = str(refused.value)
    assert "\n" not in message and "'<|call|>'" in message, message


def test_serve_refuses_an_inexact_harmony_template_with_one_line_and_exit_2(
        fake: Fake, tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.helpers.procs import seedproxy_env

    line = '{{- "<|start|>user<|message|>" + message.content + "<|end|>" }}'
    template = tmp_path / "broken.jinja"
    template.write_text(_broken(line, "{%- if loop.last %}{{- '(latest) ' }}{%- endif %}"
                                + line))
    done = subprocess.run(
        [sys.executable, "-m", "seedproxy", "serve", "--upstream", fake.url, "--port", "0",
         "--token-in-token-out", "--tokenizer", str(tokenizer_dir(NAME)),
         "--chat-template", str(template)],
        env=seedproxy_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr
    assert lines[0].startswith("seedproxy: error: the chat template cannot render "
                               "incrementally: in the full render of [user, assistant, user] "
                               "the assistant turn is not the prompt + the reply")


# 2. conversations through the proxy

def test_a_five_turn_chat_with_reasoning_extends_every_prompt_exactly(
        fake: Fake, start_proxy: Callable[..., str]) -> None:
    base = start(start_proxy, fake)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What do <|end|> and <|return|> mean?"},
    ]
    first = expected_first(messages)
    script = [emitted(ANALYSIS.format(f"Step {k}.") + FINAL.format(f"Answer {k}."))
              for k in range(5)]
    fake.switches.script = list(script)
    for k in range(5):
        got = post(base, "chat", {"messages": messages, "stream": k % 2 == 1})
        assert got["finish_reason"] == "stop"
        assert got["message"]["content"] == f"Answer {k}."
        assert got["message"]["reasoning_content"] == f"Step {k}."
        messages += [got["message"], {"role": "user", "content": f"Question {k + 1}?"}]
    sent, sampled = prompts(fake), completions(base, "chat")
    assert sent[0] == first
    # The whole turn was sampled, analysis and final messages, up to <|return|>.
    assert sampled == [s[:s.index(token("<|return|>")) + 1] for s in script]
    assert_chain(sent, sampled)
    for k in range(1, 5):  # no <|end|> after <|return|>: the new user message follows
        added = tok().decode(sent[k][len(sent[k - 1]) + len(sampled[k - 1]):])
        assert added == f"<|start|>user<|message|>Question {k}?<|end|><|start|>assistant"
    stops = fake.received[-1]["sampling_params"]["stop_token_ids"]
    assert set(stops) == {token("<|return|>"), token("<|call|>"), token("<|endoftext|>")}


def test_the_concat_export_holds_the_chain_with_the_sampled_ids_masked(
        fake: Fake, start_proxy: Callable[..., str]) -> None:
    base = start(start_proxy, fake)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Hi."}]
    fake.switches.script = [emitted(ANALYSIS.format(f"R{k}.") + FINAL.format(f"A{k}."))
                            for k in range(3)]
    for k in range(3):
        got = post(base, "mask", {"messages": messages})
        messages += [got["message"], {"role": "user", "content": f"Q{k}?"}]
    sent, sampled = prompts(fake), completions(base, "mask")
    concat = httpx.get(f"{base}/sessions/mask/trajectory", params={"style": "concat"},
                       timeout=60).json()
    (branch,) = concat["branches"]
    assert branch["token_ids"] == sent[-1] + sampled[-1]
    mask = [0] * len(branch["token_ids"])
    for prompt, completion in zip(sent, sampled, strict=True):
        mask[len(prompt):len(prompt) + len(completion)] = [1] * len(completion)
    assert branch["loss_mask"] == mask


def test_a_four_turn_tool_conversation_extends_every_prompt_exactly(
        fake: Fake, start_proxy: Callable[..., str]) -> None:
    base = start(start_proxy, fake)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Use the tools."},
        {"role": "user", "content": "Define two words."},
    ]
    first = expected_first(messages, tools=TOOLS)
    turns = [  # (what the model writes, content, call argument)
        (ANALYSIS.format("Plan.") + CALL.format('{"word": "apple"}'), None, "apple"),
        (PREAMBLE.format("Now the pear.") + CALL.format('{"word":"pear"}'),
         "Now the pear.", "pear"),
        (ANALYSIS.format("Sum up.") + FINAL.format("Both are fruit."), "Both are fruit.",
         None),
        (FINAL.format("You are welcome."), "You are welcome.", None),
    ]
    fake.switches.script = [emitted(text) for text, _, _ in turns]
    for k, (_, content, word) in enumerate(turns):
        got = post(base, "tools", {"messages": messages, "tools": TOOLS,
                                   "stream": k % 2 == 0})
        message = got["message"]
        assert (message.get("content") or None) == content, message
        if word is not None:
            assert got["finish_reason"] == "tool_calls", message
            (call,) = message["tool_calls"]
            assert call["function"]["name"] == "lookup"
            assert json.loads(call["function"]["arguments"]) == {"word": word}
            messages += [message, {"role": "tool", "tool_call_id": call["id"],
                                   "content": f"a {word} fruit"}]
        else:
            assert got["finish_reason"] == "stop"
            messages += [message, {"role": "user", "content": "Thanks."}]
    sent, sampled = prompts(fake), completions(base, "tools")
    assert sent[0] == first
    assert [s[-1] for s in sampled] == [token("<|call|>")] * 2 + [token("<|return|>")] * 2
    assert_chain(sent, sampled)
    added = [tok().decode(sent[k][len(sent[k - 1]) + len(sampled[k - 1]):])
             for k in range(1, 4)]
    assert added == [
        '<|start|>functions.lookup to=assistant<|channel|>commentary<|message|>'
        '"a apple fruit"<|end|><|start|>assistant',
        '<|start|>functions.lookup to=assistant<|channel|>commentary<|message|>'
        '"a pear fruit"<|end|><|start|>assistant',
        "<|start|>user<|message|>Thanks.<|end|><|start|>assistant",
    ]


def test_reasoning_effort_changes_the_prompt_as_apply_chat_template_does(
        fake: Fake, start_proxy: Callable[..., str]) -> None:
    base = start(start_proxy, fake)
    low = {"reasoning_effort": "low"}
    messages: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
    fake.switches.script = [emitted(FINAL.format(f"ok {k}")) for k in range(2)]
    for _ in range(2):
        got = post(base, "effort", {"messages": messages, "chat_template_kwargs": low})
        messages += [got["message"], {"role": "user", "content": "again"}]
    sent, sampled = prompts(fake), completions(base, "effort")
    assert sent[0] == expected_first(messages[:1], **low)
    assert sent[0] != expected_first(messages[:1])
    assert "Reasoning: low" in tok().decode(sent[0])
    assert_chain(sent, sampled)


def test_a_top_level_reasoning_effort_reaches_the_template_as_sglang_passes_it(
        fake: Fake, start_proxy: Callable[..., str]) -> None:
    """OpenAI's ``reasoning_effort`` field is the template's ``reasoning_effort`` (the
    kwargs' own wins); a turn that changes it is a full render on a new branch, and a
    value SGLang refuses is a 400 naming the field, sending nothing, using no index."""
    base = start(start_proxy, fake)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
    fake.switches.script = [emitted(FINAL.format(f"ok {k}")) for k in range(3)]
    got = post(base, "top", {"messages": messages, "reasoning_effort": "low"})
    messages += [got["message"], {"role": "user", "content": "again"}]
    post(base, "top", {"messages": messages, "reasoning_effort": "low"})
    post(base, "top", {"messages": messages, "reasoning_effort": "high",
                       "chat_template_kwargs": {"reasoning_effort": "medium"}})
    sent, sampled = prompts(fake), completions(base, "top")
    assert sent[0] == expected_first(messages[:1], reasoning_effort="low")
    assert_chain(sent[:2], sampled[:2])
    assert sent[2] == expected_first(messages, reasoning_effort="medium")
    lineage = [i["lineage"] for i in httpx.get(f"{base}/sessions/top/trajectory",
                                               timeout=60).json()["interactions"]]
    assert lineage[1]["extends"] == {"interaction_id": "i0", "choice": 0}
    assert lineage[2]["extends"] is None and lineage[2]["forked_from"] is not None
    refused = httpx.post(f"{base}/sessions/top/v1/chat/completions", timeout=60, json={
        "model": "m", "messages": messages, "reasoning_effort": "extreme"})
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "reasoning_effort"
    assert len(prompts(fake)) == 3
    assert httpx.get(f"{base}/sessions/top", timeout=60).json()["next_index"] == 3


def test_a_turn_cut_off_gets_its_message_closed_before_the_next_messages(
        fake: Fake, start_proxy: Callable[..., str]) -> None:
    """Cut inside the final message (no <|return|>), the next turn closes the message
    with ``<|end|>`` (as the template ends one sent back) before the new user message."""
    base = start(start_proxy, fake)
    cut = ANALYSIS.format("R.") + "<|channel|>final<|message|>Half an"
    fake.switches.script = [ids(tok(), cut), emitted(FINAL.format("Fine."))]
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Go."}]
    got = post(base, "cut", {"messages": messages, "max_tokens": 64})
    assert got["finish_reason"] == "length"
    assert got["message"]["content"] == "Half an"
    assert got["message"]["reasoning_content"] == "R."
    messages += [got["message"], {"role": "user", "content": "Go on."}]
    post(base, "cut", {"messages": messages})
    first, second = prompts(fake)
    before = first + ids(tok(), cut)
    assert second[:len(before)] == before
    assert tok().decode(second[len(before):]) == (
        "<|end|><|start|>user<|message|>Go on.<|end|><|start|>assistant")


# 3. the parsers, as SGLang's detectors parse the same text

_LOOKUP = ('<|start|>assistant<|channel|>commentary to=functions.lookup <|constrain|>json'
           '<|message|>')


@pytest.mark.parametrize(("text", "reasoning", "content", "calls"), [
    pytest.param("<|channel|>analysis<|message|>Step 0.<|end|><|start|>assistant<|channel|>"
                 "final<|message|>Answer 0.", "Step 0.", "Answer 0.", [], id="analysis+final"),
    pytest.param("<|channel|>final<|message|>Hi there.", "", "Hi there.", [],
                 id="final only"),
    pytest.param('<|channel|>analysis<|message|>Plan.<|end|>' + _LOOKUP
                 + '{"word": "apple"}<|call|>', "Plan.", "", [("lookup", {"word": "apple"})],
                 id="analysis+call"),
    pytest.param('<|channel|>analysis<|message|>Plan.<|end|><|start|>assistant<|channel|>'
                 'commentary<|message|>Let me look.<|end|>' + _LOOKUP
                 + '{"word": "pear"}<|call|>', "Plan.", "Let me look.",
                 [("lookup", {"word": "pear"})], id="preamble is content"),
    pytest.param('<|channel|>analysis<|message|>Plan.<|end|><|start|>assistant<|channel|>'
                 'commentary to=functions.lookup<|constrain|>json<|message|>{"word": "fig"}'
                 '<|call|>', "Plan.", "", [("lookup", {"word": "fig"})],
                 id="no space before constrain"),
    pytest.param('<|channel|>analysis<|message|>Plan.<|end|>' + _LOOKUP + '{"word": <|call|>',
                 "Plan.", _LOOKUP + '{"word": <|call|>', [], id="bad JSON stays content"),
    pytest.param('<|channel|>analysis<|message|>Plan.<|end|><|start|>assistant to=functions.'
                 'lookup<|channel|>commentary json<|message|>{"word": "fig"}<|call|>', "Plan.",
                 '<|start|>assistant to=functions.lookup<|channel|>commentary json<|message|>'
                 '{"word": "fig"}<|call|>', [], id="to= before the channel is not a call"),
    pytest.param("<|channel|>analysis<|message|>Thinking about", "Thinking about", "", [],
                 id="cut in analysis"),
    pytest.param("<|channel|>analysis<|message|>R.<|end|><|start|>assistant<|channel|>final"
                 "<|message|>Half an", "R.", "Half an", [], id="cut in final"),
    pytest.param("<|channel|>commentary<|message|>Note.<|end|><|start|>assistant<|channel|>"
                 "final<|message|>Done.", "", "Note.Done.", [], id="preamble then final"),
])
def test_the_parsers_read_what_sglangs_gpt_oss_detectors_read(
        text: str, reasoning: str, content: str, calls: list[tuple[str, Any]]) -> None:
    """Pinned from SGLang 0.5.23's ``GptOssDetector`` (reasoning) then ``GptOssDetector``
    (tools), non-streaming, run on each text; ours gives the same whole and streamed a
    character at a time."""
    for pieces in ([text], list(text)):
        said, got = parse(pieces)
        assert said == {"reasoning": reasoning, "content": content}
        assert got == calls


def parse(pieces: list[str]) -> tuple[dict[str, str], list[tuple[str, Any]]]:
    """The reasoning parser, then the tool parser on its content, as SGLang chains them."""
    think, tools = REASONING_PARSERS["gpt-oss"](), TOOL_PARSERS["gpt-oss"]()
    shown, said = Held(), {"reasoning": "", "content": ""}
    for part in [*(p for piece in pieces for p in think.feed(piece)), *think.finish()]:
        kind, piece = part
        if kind == "reasoning":
            said["reasoning"] += piece
        else:
            said["content"] += shown.feed(tools.feed(piece))
    rest, got = tools.finish()
    said["content"] += shown.feed(rest)
    return said, [(c.name, json.loads(c.arguments)) for c in got]
