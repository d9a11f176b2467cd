"""Structured output, penalties, logit_bias and stop_regex on the engine (tiny model).

The grammar tests hold for any weights: whatever the model prefers, the mask leaves only
tokens that keep the output inside the language, and the sequence ends with EOS there.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import httpx
import pytest
import torch

from seedproxy.engine.grammar import LogitBias, Penalties

pytestmark = pytest.mark.engine

# Compact JSON (no free whitespace), so a random model finishes in a few tokens.
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 6},
                   "age": {"type": "integer", "minimum": 0, "maximum": 120},
                   "pet": {"enum": ["cat", "dog"]}},
    "required": ["name", "age", "pet"], "additionalProperties": False,
    "x-guidance": {"whitespace_flexible": False},
}


def check_person(text: str) -> None:
    value = json.loads(text)
    assert set(value) == {"name", "age", "pet"}
    assert isinstance(value["name"], str) and len(value["name"]) <= 6
    assert isinstance(value["age"], int) and 0 <= value["age"] <= 120
    assert value["pet"] in ("cat", "dog")


def gen(client: httpx.Client, sp: dict[str, Any], text: str = "Answer:",
        **extra: Any) -> dict[str, Any]:
    r = client.post("/generate", json={"text": text, "sampling_params": sp, **extra})
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_regex_output_always_matches_and_repeats_per_seed(client: httpx.Client,
                                                          seed: int) -> None:
    sp = {"max_new_tokens": 30, "sampling_seed": seed, "regex": "[0-9]{3}-[a-z]{2,5}"}
    first, again = gen(client, sp), gen(client, sp)
    assert re.fullmatch("[0-9]{3}-[a-z]{2,5}", first["text"])
    assert first["meta_info"]["finish_reason"]["type"] == "stop"
    assert again["output_ids"] == first["output_ids"]


@pytest.mark.parametrize("seed", [0, 1])
def test_json_schema_output_parses_and_matches(client: httpx.Client, seed: int) -> None:
    sp = {"max_new_tokens": 60, "sampling_seed": seed, "json_schema": json.dumps(SCHEMA)}
    out = gen(client, sp)
    check_person(out["text"])
    assert gen(client, sp)["output_ids"] == out["output_ids"]


def test_constrained_outputs_are_pinned(client: httpx.Client) -> None:
    """Exact tokens for one seed: every choice copies the request's checked matcher and
    starts from its first mask, computed once; a copy or mask that drifted from a fresh
    matcher's would move these (the values a matcher built per choice gave)."""
    out = gen(client, {"max_new_tokens": 60, "sampling_seed": 5,
                       "json_schema": json.dumps(SCHEMA)}, text="A person:")
    assert out["output_ids"] == [39428, 1245, 1799, 47999, 5107, 10242, 14460, 473, 1799, 40,
                                 36, 1627, 6322, 25535, 4326, 87, 23597, 2]
    assert out["text"] == '{"name":"/())(-","age":84,"pet":"dog"}'
    r = client.post("/v1/completions", json={
        "prompt": "Id:", "max_tokens": 20, "seed": 3, "n": 2,
        "regex": "[A-Z]{2}[0-9]{2}-[a-z]{1,6}"})
    assert [c["text"] for c in r.json()["choices"]] == ["IH31-ossils", "IH31-ossils"]


def test_a_grammar_that_ends_before_min_new_tokens_ends_the_answer(
        client: httpx.Client) -> None:
    """The grammar allows only a stop token once "ab" is written: the answer ends there
    with that stop, rather than min_new_tokens forcing tokens the grammar never allows."""
    sp = {"max_new_tokens": 8, "sampling_seed": 4, "regex": "ab"}
    free = gen(client, sp)
    held = gen(client, {**sp, "min_new_tokens": 6})
    assert held["text"] == free["text"] == "ab"
    assert held["output_ids"] == free["output_ids"]
    assert held["meta_info"]["finish_reason"] == free["meta_info"]["finish_reason"] == {
        "type": "stop", "matched": free["output_ids"][-1]}
    # a grammar that leaves room keeps min_new_tokens: no stop before the sixth token
    longer = gen(client, {**sp, "regex": "[a-z]+", "min_new_tokens": 6})
    assert len(longer["output_ids"]) >= 6 and re.fullmatch("[a-z]+", longer["text"])


def test_ebnf_output_is_in_the_language(client: httpx.Client) -> None:
    for seed in range(3):
        out = gen(client, {"max_new_tokens": 8, "sampling_seed": seed,
                           "ebnf": 'root ::= "yes" | "no" | "maybe"'})
        assert out["text"] in ("yes", "no", "maybe")


def test_chat_response_format_json_schema(oai: Any) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}}
    texts = [oai.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "A person"}], max_tokens=60,
        seed=7, response_format=fmt).choices[0].message.content for _ in range(2)]
    check_person(texts[0])
    assert texts[0] == texts[1]


def test_completions_regex_and_streaming_agree(client: httpx.Client) -> None:
    body = {"prompt": "Id:", "max_tokens": 20, "seed": 3, "regex": "[A-Z]{2}[0-9]{2}"}
    whole = client.post("/v1/completions", json=body).json()["choices"][0]["text"]
    assert re.fullmatch("[A-Z]{2}[0-9]{2}", whole)
    with client.stream("POST", "/v1/completions", json={**body, "stream": True}) as r:
        parts = [json.loads(line[6:]) for line in r.iter_lines()
                 if line.startswith("data: {")]
    assert "".join(p["choices"][0]["text"] for p in parts) == whole


def test_a_structural_tag_constrains_what_follows_its_trigger(client: httpx.Client) -> None:
    """SGLang's legacy structural tag on ``/generate``: free text until a trigger, then
    the structure's begin, a value of its schema and its end. A bias makes the random
    model write the trigger; whatever it writes after it obeys the tag, the same for
    the same seed."""
    from seedproxy.engine.testing import tiny_tokenizer

    tok = tiny_tokenizer()
    call, colon = (tok.convert_tokens_to_ids(t) for t in ("Call", ":"))
    tag = {"triggers": ["Call:"], "structures": [
        {"begin": "Call:", "schema": {"type": "integer", "minimum": 0, "maximum": 99},
         "end": "."}]}
    sp = {"max_new_tokens": 24, "sampling_seed": 4, "structural_tag": json.dumps(tag),
          "logit_bias": {str(call): 40.0, str(colon): 40.0}}
    out = gen(client, sp)
    text = out["text"]
    assert "Call:" in text, text
    for segment in text.split("Call:")[1:]:
        number = re.match(r"\s*([0-9]+)\.", segment)
        assert number is not None and 0 <= int(number.group(1)) <= 99, text
    assert gen(client, sp)["output_ids"] == out["output_ids"]


DIGIT = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
         "required": ["n"], "additionalProperties": False,
         "x-guidance": {"whitespace_flexible": False}}


@pytest.mark.parametrize(("trigger", "begin", "end", "content"), [
    ("<a>", "<a>", "</a>", '<<a>{"n":4}</a>a>a>'),
    ("<function=get_weather>", "<function=get_weather>", "</function>", None),
    ("<function=", "<function=get_weather>", "</function>",
     '<function=get_weather>{"n":4}</function>",='),
])
def test_a_legacy_tag_whose_strings_look_like_tags_matches_them_as_text(
        client: httpx.Client, trigger: str, begin: str, end: str, content: str | None) -> None:
    """Begin, end and trigger strings are literal text, as xgrammar reads them (this
    vocabulary has no special token ``<a>``): the chat route answers, and a bias toward
    the trigger's text tokens makes the random model write it, the structure following.
    The ids are pinned: the prompt is the chat's, so /generate answers as the chat did."""
    from seedproxy.engine.testing import tiny_tokenizer

    tok = tiny_tokenizer()
    tag = {"structures": [{"begin": begin, "schema": DIGIT, "end": end}],
           "triggers": [trigger]}
    bias = {str(i): 30.0 for i in tok.encode(trigger)}
    messages = [{"role": "user", "content": "x"}]
    r = client.post("/v1/chat/completions", json={
        "model": "m", "messages": messages, "max_tokens": 16, "seed": 6, "logit_bias": bias,
        "response_format": {"type": "structural_tag", **tag}})
    assert r.status_code == 200, r.text
    if content is None:
        return
    assert r.json()["choices"][0]["message"]["content"] == content
    prompt = tok.encode(tok.apply_chat_template(messages, add_generation_prompt=True,
                                                tokenize=False))
    out = client.post("/generate", json={"input_ids": prompt, "sampling_params": {
        "max_new_tokens": 16, "sampling_seed": 6, "logit_bias": bias,
        "structural_tag": json.dumps(tag)}}).json()
    assert out["text"] == content
    if trigger == "<a>":
        assert out["output_ids"] == [44, 44, 81, 46, 39428, 94, 1799, 36, 109, 9617, 81, 46,
                                     81, 46, 81, 46]


def test_a_legacy_trigger_that_is_a_special_token_matches_that_token(
        client: httpx.Client) -> None:
    """``<|im_start|>`` is one special token of this vocabulary (id 1): the trigger is
    that token, never its text spelled in pieces, and the structure follows it."""
    tag = {"structures": [{"begin": "<|im_start|>", "schema": DIGIT, "end": "."}],
           "triggers": ["<|im_start|>"]}
    out = gen(client, {"max_new_tokens": 12, "sampling_seed": 1, "logit_bias": {"1": 30.0},
                       "structural_tag": json.dumps(tag)})
    assert out["output_ids"] == [1, 39428, 94, 1799, 36, 19181, 1, 39428, 94, 1799, 36,
                                 19181]
    assert out["text"] == '{"n":4}.{"n":4}.'


@pytest.mark.parametrize("tag", [
    "{}", "[]", '{"structures": [], "triggers": ["a"]}',
    '{"structures": [{"begin": "x", "schema": {}, "end": "y"}], "triggers": ["z"]}',
    '{"structures": [{"begin": "x", "end": "y"}], "triggers": ["x"]}',
])
def test_a_structural_tag_it_cannot_build_is_a_400(client: httpx.Client, tag: str) -> None:
    r = client.post("/generate", json={"text": "x", "sampling_params": {"structural_tag": tag}})
    assert r.status_code == 400, r.text
    assert "Invalid structural_tag" in r.json()["error"]["message"]


@pytest.mark.parametrize(("path", "body", "param"), [
    ("/generate", {"text": "x", "sampling_params": {"regex": "[0-9"}}, "regex"),
    ("/generate", {"text": "x", "sampling_params": {"json_schema": "{nope"}}, "json_schema"),
    ("/generate", {"text": "x", "sampling_params": {"ebnf": "root ::= ("}}, "ebnf"),
    ("/generate", {"text": "x", "sampling_params": {"structural_tag": "{}"}},
     "structural_tag"),
    ("/generate", {"text": "x", "sampling_params": {"stop_regex": "("}}, "stop_regex"),
    # re raises OverflowError and RecursionError for these, not re.error
    ("/generate", {"text": "x", "sampling_params": {"stop_regex": "a{4294967296}"}},
     "stop_regex"),
    ("/generate", {"text": "x", "sampling_params": {"stop_regex": "(" * 100_000}},
     "stop_regex"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                              "response_format": {"type": "structural_tag"}},
     "response_format"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                              "response_format": {"type": "json_schema"}},
     "response_format"),
    ("/v1/completions", {"prompt": "x", "regex": "a", "ebnf": 'root ::= "a"'}, "ebnf"),
])
def test_unsupported_or_invalid_constraints_are_400_naming_the_field(
        client: httpx.Client, path: str, body: dict[str, Any], param: str) -> None:
    r = client.post(path, json=body)
    assert r.status_code == 400, r.text
    if path == "/generate":
        assert param in r.json()["error"]["message"]
    else:
        assert r.json()["param"] == param


def fuel_grammar(triggers: int) -> str:
    """Lark (which the ``ebnf`` field also reads) for free text cut at one of
    ``triggers`` words, each cut a terminal that excludes every trigger: from about 15
    triggers, building its lexer runs out of llguidance's fuel."""
    words = [hashlib.sha256(str(k).encode()).hexdigest()[:12] for k in range(triggers)]
    never = "(" + " | ".join(json.dumps(w) for w in words) + ")"
    cuts = [f"CUT{i}: (/(?s:.*)/ {json.dumps(w)}) & ~(/(?s:.*)/ {never} /(?s:.+)/)\n"
            for i, w in enumerate(words)]
    return "start: (" + " | ".join(f"CUT{i}" for i in range(triggers)) + ")*\n" + "".join(cuts)


def fuel_request(path: str, triggers: int) -> tuple[dict[str, Any], str]:
    """A request on ``path`` constrained by ``fuel_grammar(triggers)``, and its field."""
    if path == "/generate":
        return {"text": "x", "sampling_params": {"max_new_tokens": 4, "sampling_seed": 1,
                                                 "ebnf": fuel_grammar(triggers)}}, "ebnf"
    if path == "/v1/completions":
        return {"prompt": "x", "max_tokens": 4, "seed": 1,
                "ebnf": fuel_grammar(triggers)}, "ebnf"
    fmt = {"type": "grammar", "grammar": fuel_grammar(triggers)}
    return {"messages": [{"role": "user", "content": "x"}], "max_tokens": 4, "seed": 1,
            "response_format": {"type": "structural_tag", "format": fmt}}, "structural_tag"


PATHS = ["/generate", "/v1/completions", "/v1/chat/completions"]


@pytest.mark.parametrize("path", PATHS)
def test_a_grammar_out_of_lexer_fuel_is_a_400_naming_the_field(client: httpx.Client,
                                                               path: str) -> None:
    """The matcher is in error before the first token: refused before any decoding
    (not answered 200 with only the end of sequence allowed: an empty answer)."""
    body, field = fuel_request(path, 20)
    r = client.post(path, json=body)
    assert r.status_code == 400, r.text
    error = r.json()["error"] if path == "/generate" else r.json()
    message = error["message"]
    assert message.startswith(f"Invalid {field}: ") and "fuel exhausted" in message, message
    assert len(message) <= 600
    if path != "/generate":
        assert (error["object"], error["type"], error["param"], error["code"]) == (
            "error", "BadRequestError", field, 400)


@pytest.mark.parametrize("path", PATHS)
def test_the_same_grammar_with_fewer_triggers_decodes(client: httpx.Client,
                                                      path: str) -> None:
    body, _ = fuel_request(path, 12)
    r = client.post(path, json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    text = out["text"] if path == "/generate" else (
        out["choices"][0].get("text") or out["choices"][0]["message"]["content"])
    assert text, out


def test_penalty_formulas_are_sglangs() -> None:
    row = torch.tensor([2.0, -2.0, 1.0, -1.0, 0.5])
    out = Penalties(0.5, 0.25, 1.0).process(row.clone(), [0, 0, 1])
    assert torch.equal(out, torch.tensor([2.0 - 1.0 - 0.25, -2.0 - 0.5 - 0.25, 1.0, -1.0, 0.5]))
    out = Penalties(0.0, 0.0, 2.0).process(row.clone(), [0, 1, 1])
    assert torch.equal(out, torch.tensor([1.0, -4.0, 1.0, -1.0, 0.5]))
    out = LogitBias(((2, 3.0), (4, -1.5))).process(row.clone(), [])
    assert torch.equal(out, torch.tensor([2.0, -2.0, 4.0, -1.0, -1.0]))


def full_row(client: httpx.Client, sp: dict[str, Any], vocab: int) -> list[dict[int, float]]:
    out = gen(client, {"temperature": 0, "max_new_tokens": 2, **sp}, return_logprob=True,
              top_logprobs_num=vocab)
    return [{tid: lp for lp, tid, _ in top} for top in out["meta_info"]["output_top_logprobs"]]


def test_penalties_and_bias_act_on_the_served_distribution(client: httpx.Client) -> None:
    vocab = 49152
    base = full_row(client, {}, vocab)
    first = max(base[0], key=lambda t: base[0][t])
    other = next(t for t in base[1] if t != first)
    # logit_bias shifts one token's logit by exactly the bias, at every step.
    biased = full_row(client, {"logit_bias": {str(other): 1.5}}, vocab)
    assert biased[0][other] - biased[0][first] == pytest.approx(
        base[0][other] - base[0][first] + 1.5, abs=1e-4)
    # Step 2: the first token has been generated once, so frequency and presence
    # penalties lower its logit by the penalty; step 1 (no history) is untouched.
    for key in ("frequency_penalty", "presence_penalty"):
        pen = full_row(client, {key: 0.75}, vocab)
        assert pen[0] == pytest.approx(base[0], abs=1e-5)
        assert pen[1][first] - pen[1][other] == pytest.approx(
            base[1][first] - base[1][other] - 0.75, abs=1e-4)


def test_logit_bias_can_force_a_token(client: httpx.Client) -> None:
    out = gen(client, {"max_new_tokens": 4, "sampling_seed": 1, "logit_bias": {"42": 100}})
    assert out["output_ids"] == [42, 42, 42, 42]


def test_repetition_penalty_lowers_only_generated_tokens(client: httpx.Client) -> None:
    vocab = 49152
    base = full_row(client, {}, vocab)
    rep = full_row(client, {"repetition_penalty": 1.8}, vocab)
    first = max(base[0], key=lambda t: base[0][t])
    others = [t for t in list(base[1])[:50] if t != first]
    anchor = others[0]
    assert rep[0] == pytest.approx(base[0], abs=1e-5)
    for t in others:  # unseen tokens keep their relative logits
        assert rep[1][t] - rep[1][anchor] == pytest.approx(
            base[1][t] - base[1][anchor], abs=1e-4)
    # the generated token is scaled towards -inf whatever its sign (/r or *r)
    assert rep[1][first] - rep[1][anchor] < base[1][first] - base[1][anchor] - 1e-3


def test_stop_regex_stops_at_the_first_match(client: httpx.Client) -> None:
    sp: dict[str, Any] = {"max_new_tokens": 16, "temperature": 0}
    full = gen(client, sp)
    target = full["text"][4:7]
    pattern = re.escape(target)
    out = gen(client, {**sp, "stop_regex": [pattern]})
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": pattern}
    assert full["output_ids"][: len(out["output_ids"])] == out["output_ids"]
    assert target in out["text"]
    shorter = gen(client, {**sp, "max_new_tokens": len(out["output_ids"]) - 1})
    assert target not in shorter["text"]


def test_the_grammar_tokenizer_is_built_after_the_first_answer_not_beside_it() -> None:
    """The llguidance tokenizer (about a second of CPU) is not built while the first
    request is answered (held here mid-generation); it is once that request is done."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from seedproxy.engine import start_engine_thread
    from seedproxy.engine.testing import tiny_model
    from tests.helpers.step_hold import StepHold
    from tests.helpers.waiting import wait_until

    def warming() -> int:
        return sum(t.name == "seedproxy-grammar-warm" for t in threading.enumerate())

    before = warming()  # other engines of this test run may be warming their own
    hold = StepHold()
    hold.arm(at=1)
    running = start_engine_thread(tiny_model(), on_step=hold)
    try:
        app: Any = running.server.config.app
        grammars = app.state.engine.grammars
        with httpx.Client(base_url=running.url, timeout=60) as client, \
                ThreadPoolExecutor(1) as pool:
            first = pool.submit(client.post, "/generate", json={
                "input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 3}})
            assert hold.held.wait(timeout=60)
            started = warming() > before  # (a finished warm-up would have set _ll)
            built = grammars._ll is not None
            hold.release()
            assert first.result().status_code == 200
        assert not started and not built
        wait_until(lambda: grammars._ll is not None)
    finally:
        hold.release()
        running.stop()
