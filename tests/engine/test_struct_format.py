"""xgrammar's structural tag (``{"type": "structural_tag", "format": {...}}``) on the
engine (tiny random model): every supported format type constrains the output, the same
seed gives the same tokens, SGLang's own two cases pass through seedproxy's token-in-
token-out chat route, and hostile or unsupported formats are 400s naming the field.

The grammar tests hold for any weights: the mask leaves only tokens inside the language.
Where a format's interesting part needs the model to write a given string (a trigger, a
tag's end), ``logit_bias`` pushes the random model towards it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import jsonschema
import openai
import pytest

from seedproxy.engine import RunningEngine
from seedproxy.engine.model import default_gguf_path, gguf_tokenizer_dir
from seedproxy.engine.testing import tiny_tokenizer
from tests.engine.test_structured import SCHEMA, check_person

pytestmark = pytest.mark.engine

CALL, COLON, DOT, EOS = 12800, 42, 30, 2  # "Call", ":", ".", "<|im_end|>" in SmolLM2's vocab
DIGIT = {"type": "regex", "pattern": "[0-9]"}
NUMBER = {"type": "json_schema", "json_schema": {"type": "integer", "minimum": 0,
                                                 "maximum": 99}}
SGLANG_SCHEMA = {  # SGLang's test_structural_tag.py, test_stag_json_schema_openai
    "type": "object",
    "properties": {"name": {"type": "string", "pattern": "^[\\w]+$"},
                   "population": {"type": "integer"}},
    "required": ["name", "population"], "additionalProperties": False,
}


def tag_text(fmt: dict[str, Any]) -> str:
    return json.dumps({"type": "structural_tag", "format": fmt})


def gen(client: httpx.Client, fmt: dict[str, Any], seed: int = 0, max_new_tokens: int = 40,
        **sp: Any) -> dict[str, Any]:
    r = client.post("/generate", json={"text": "Answer:", "sampling_params": {
        "max_new_tokens": max_new_tokens, "sampling_seed": seed,
        "structural_tag": tag_text(fmt), **sp}})
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def stopped(out: dict[str, Any]) -> str:
    assert out["meta_info"]["finish_reason"]["type"] == "stop", out
    text: str = out["text"]
    return text


@pytest.mark.parametrize("seed", [0, 1])
def test_const_string_is_written_exactly(client: httpx.Client, seed: int) -> None:
    value = "The capital of France is Berlin."
    assert stopped(gen(client, {"type": "const_string", "value": value}, seed)) == value


@pytest.mark.parametrize("seed", [0, 1])
def test_json_schema_output_validates(client: httpx.Client, seed: int) -> None:
    out = stopped(gen(client, {"type": "json_schema", "json_schema": SCHEMA}, seed, 60))
    check_person(out)
    jsonschema.validate(json.loads(out), SCHEMA)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_regex_output_fullmatches_and_repeats(client: httpx.Client, seed: int) -> None:
    fmt = {"type": "regex", "pattern": "[0-9]{3}-[a-z]{2,5}"}
    first = gen(client, fmt, seed)
    assert re.fullmatch("[0-9]{3}-[a-z]{2,5}", stopped(first))
    assert gen(client, fmt, seed)["output_ids"] == first["output_ids"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sequence_or_tag_and_grammar_compose(client: httpx.Client, seed: int) -> None:
    fmt = {"type": "sequence", "elements": [
        {"type": "tag", "begin": "<a>", "content": {"type": "or", "elements": [
            {"type": "const_string", "value": "x"}, {"type": "regex", "pattern": "[0-9]{2}"},
            NUMBER]}, "end": ["</a>", "</b>"]},
        {"type": "grammar", "grammar": 'root ::= " " ("yes" | "no")'},
        {"type": "const_string", "value": "!"}]}
    out = stopped(gen(client, fmt, seed))
    m = re.fullmatch(r"<a>(x|[0-9]{2}|\s*[0-9]+\s*)</[ab]> (yes|no)!", out)
    assert m is not None, out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_repeats_hold_their_counts(client: httpx.Client, seed: int) -> None:
    fmt = {"type": "sequence", "elements": [
        {"type": "repeat", "min": 2, "max": 3, "content": DIGIT},
        {"type": "optional", "content": {"type": "const_string", "value": "?"}},
        {"type": "plus", "content": {"type": "tag", "begin": "(", "content": NUMBER,
                                     "end": ")"}},
        {"type": "star", "content": {"type": "const_string", "value": "ab"}},
        {"type": "const_string", "value": "!"}]}
    out = gen(client, fmt, seed, 60)
    text = out["text"]
    if out["meta_info"]["finish_reason"]["type"] == "stop":
        assert re.fullmatch(r"[0-9]{2,3}\??(\(\s*[0-9]+\s*\))+(ab)*!", text), out
    else:  # cut by max_new_tokens inside the star: a prefix of the language
        assert re.fullmatch(r"[0-9]{2,3}\??(\(\s*[0-9]+\s*\))+(ab)*a?", text), out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_any_text_in_a_tag_runs_to_the_first_end(client: httpx.Client, seed: int) -> None:
    """xgrammar's reading: the tag's text may not hold its end, and the tag is closed
    right after it (the bias makes the random model write "." everywhere it may)."""
    fmt = {"type": "sequence", "elements": [
        {"type": "tag", "begin": "<t>", "content": {"type": "any_text"}, "end": "."},
        {"type": "const_string", "value": "!"}]}
    out = stopped(gen(client, fmt, seed, logit_bias={str(DOT): 16.0}))
    assert out.startswith("<t>") and out.endswith(".!"), out
    assert "." not in out[3:-2], out


def call_tags(**options: Any) -> dict[str, Any]:
    return {"type": "triggered_tags", "triggers": ["Call:"], "tags": [
        {"type": "tag", "begin": "Call:", "content": NUMBER, "end": "."}], **options}


def check_calls(text: str) -> list[str]:
    """The free text between calls (none holds the trigger), checking each call."""
    pieces = text.split("Call:")
    for segment in pieces[1:]:
        m = re.match(r"\s*([0-9]+)\s*\.", segment)
        assert m is not None and 0 <= int(m.group(1)) <= 99, text
    return pieces


BIAS = {str(CALL): 40.0, str(COLON): 40.0}


@pytest.mark.parametrize("seed", [3, 4])
def test_triggered_tags_text_is_free_until_a_trigger_then_the_tag_holds(
        client: httpx.Client, seed: int) -> None:
    out = gen(client, call_tags(), seed, 24, logit_bias=BIAS)
    assert "Call:" in out["text"], out
    check_calls(out["text"])
    assert gen(client, call_tags(), seed, 24, logit_bias=BIAS)["output_ids"] == out["output_ids"]


def test_triggered_tags_output_is_pinned(client: httpx.Client) -> None:
    """The exact tokens for one seed: a change in how the format is written that moves
    the mask moves these."""
    out = gen(client, call_tags(), 4, 24, logit_bias=BIAS)
    assert out["text"] == PINNED_TEXT


PINNED_TEXT = 'CallCallCallCallCallCall:0."):CallCallCallCallCallCallCallCallCallCall:0."):'


def test_many_triggers_leave_the_text_free(client: httpx.Client) -> None:
    """40 unrelated triggers: the text is still free (a grammar that ran out of
    llguidance's lexer fuel would leave only the end of sequence: an empty answer)."""
    names = [hashlib.sha256(str(k).encode()).hexdigest()[:12] for k in range(40)]
    fmt = {"type": "triggered_tags", "triggers": names, "tags": [
        {"type": "tag", "begin": name, "content": NUMBER, "end": "."} for name in names]}
    out = gen(client, fmt, 5, 16)
    assert out["meta_info"]["finish_reason"]["type"] == "length", out
    assert not any(name in out["text"] for name in names), out


def test_at_least_one_and_stop_after_first_is_exactly_one_tag(client: httpx.Client) -> None:
    for seed in (0, 1, 2):
        out = stopped(gen(client, call_tags(at_least_one=True, stop_after_first=True), seed))
        assert re.fullmatch(r"Call:\s*[0-9]+\s*\.", out), out


def test_stop_after_first_ends_after_the_first_tag(client: httpx.Client) -> None:
    for seed in (3, 4):
        out = stopped(gen(client, call_tags(stop_after_first=True), seed, 40, logit_bias=BIAS))
        assert out.count("Call:") == 1 and re.search(r"Call:\s*[0-9]+\s*\.$", out), out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tags_with_separator_is_tags_and_separators_only(client: httpx.Client,
                                                         seed: int) -> None:
    fmt = {"type": "tags_with_separator", "separator": ",", "at_least_one": True, "tags": [
        {"type": "tag", "begin": "<d>", "content": DIGIT, "end": "</d>"}]}
    out = stopped(gen(client, fmt, seed, 60, logit_bias={str(EOS): 2.0}))
    assert re.fullmatch(r"<d>[0-9]</d>(,<d>[0-9]</d>)*", out), out


DEEP: dict[str, Any] = {"type": "const_string", "value": "x"}
for _ in range(40):
    DEEP = {"type": "sequence", "elements": [DEEP]}


@pytest.mark.parametrize(("tag", "says"), [
    (tag_text(DEEP), "nested deeper than 32"),
    (tag_text({"type": "or", "elements": [{"type": "const_string", "value": "x"}] * 1001}),
     "more than 1000 nodes"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    (tag_text({"type": "const_string", "value": 5}), "format.value must be a string"),
    (tag_text({"type": "sequence", "elements": "ab"}), "elements must be a list"),
    (tag_text({"type": "sequence", "elements": []}), "at least one element"),
    (tag_text({"type": "tag", "begin": "<a>", "content": {"type": "any_text"}, "end": 3}),
     "end must be a string or a list"),
    (tag_text({"type": "tag", "begin": "<a>", "content": {"type": "any_text"}, "end": ""}),
     "at least one end string must be non-empty"),
    (tag_text({"type": "triggered_tags", "triggers": [1], "tags": []}),
     "triggers must be a list of strings"),
    (tag_text(call_tags(triggers=["Go:"])), "does not match any trigger"),
    (tag_text(call_tags(triggers=["Call", "Call:"])), "inside another trigger"),
    (tag_text(call_tags(triggers=["Call:", "Go:"])), "triggers[1] starts no tag"),
    (tag_text({"type": "sequence", "elements": [{"type": "any_text"}, NUMBER]}),
     "cannot be matched exactly"),
    (tag_text({"type": "token", "token": 5}), "type 'token' is not supported"),
    (tag_text({"type": "dispatch", "rules": []}), "type 'dispatch' is not supported"),
    (tag_text({"type": "nope"}), "unknown type 'nope'"),
    (tag_text({"type": "repeat", "min": 0, "max": 5000, "content": DIGIT}),
     "from -1 to 1000"),
    (tag_text({"type": "repeat", "min": 3, "max": 2, "content": DIGIT}), "max at least min"),
    (tag_text({"type": "sequence", "elements": [
        {"type": "star", "content": {"type": "any_text"}}, NUMBER]}), "cannot be matched"),
    (tag_text({"type": "json_schema", "json_schema": {}, "style": "qwen_xml"}),
     "only 'json' is supported"),
    (tag_text({"type": "any_text", "max_tokens": 4}), "max_tokens is not supported"),
    (tag_text({"type": "grammar", "grammar": "start: 'a'", "syntax": "lark"}),
     "only 'ebnf' is supported"),
    (tag_text({"type": "regex", "pattern": "[0-9"}), "Invalid structural_tag"),
    (tag_text({"type": "regex", "pattern": ""}), "pattern must be non-empty"),
    (json.dumps({"type": "other", "format": DIGIT}), "type must be 'structural_tag'"),
])
def test_a_format_it_cannot_hold_is_a_400_naming_structural_tag(
        client: httpx.Client, tag: str, says: str) -> None:
    r = client.post("/generate", json={"text": "x", "sampling_params": {"structural_tag": tag}})
    assert r.status_code == 400, r.text
    message = r.json()["error"]["message"]
    assert message.startswith("Invalid structural_tag") and says in message, message


def test_the_chat_route_takes_response_format_structural_tag(oai: Any) -> None:
    reply = oai.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "Hi"}], max_tokens=40, seed=3,
        response_format={"type": "structural_tag", "format": {
            "type": "regex", "pattern": "[a-z]{3}[0-9]"}})
    assert re.fullmatch("[a-z]{3}[0-9]", reply.choices[0].message.content or "")
    with pytest.raises(openai.BadRequestError) as err:
        oai.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Hi"}], max_tokens=4,
            response_format={"type": "structural_tag", "format": {"type": "token"}})
    assert err.value.status_code == 400
    body: Any = err.value.body
    assert body["param"] == "structural_tag" and "'token'" in body["message"]


@pytest.fixture
def tito(engine: RunningEngine, start_proxy: Callable[..., str]) -> str:
    """seedproxy in token-in-token-out mode, as ``seedproxy serve`` runs the engine."""
    return start_proxy([engine.url], token_in_token_out=True,
                       tokenizer=str(gguf_tokenizer_dir(default_gguf_path())))


def sglang_case(base: str, session: str, fmt: dict[str, Any],
                response_format: dict[str, Any] | None = None) -> tuple[str, str]:
    """(content, finish_reason) of SGLang's test_structural_tag.py request (or the same
    with another ``response_format``), through the OpenAI SDK."""
    asked: Any = response_format or {"type": "structural_tag", "format": fmt}
    with openai.OpenAI(base_url=f"{base}/sessions/{session}/v1", api_key="EMPTY",
                       max_retries=0, timeout=120) as c:
        response = c.chat.completions.create(
            model="m", messages=[
                {"role": "system", "content": "You are a helpful AI assistant"},
                {"role": "user",
                 "content": "Introduce the capital of France. Return in a JSON format."}],
            temperature=0, max_tokens=128,
            response_format=asked)
    choice = response.choices[0]
    return choice.message.content or "", choice.finish_reason


@pytest.fixture(scope="module")
def smollm2() -> Iterator[RunningEngine]:
    """The real SmolLM2-135M-Instruct (SGLang runs these cases on a real small model)."""
    from seedproxy.engine import load_model, start_engine_thread

    running = start_engine_thread(load_model(None))
    yield running
    running.stop()


@pytest.fixture
def real_tito(smollm2: RunningEngine, start_proxy: Callable[..., str]) -> str:
    return start_proxy([smollm2.url], token_in_token_out=True,
                       tokenizer=str(gguf_tokenizer_dir(default_gguf_path())))


SGLANG_CONST = {"type": "const_string", "value": "The capital of France is Berlin."}
SGLANG_JSON = {"type": "json_schema", "json_schema": SGLANG_SCHEMA}
PLAIN_JSON = {"type": "json_schema", "json_schema": {"name": "city", "schema": SGLANG_SCHEMA}}


def check_sglang_cases(base: str) -> None:
    """SGLang's two cases: the constant exactly; the schema's JSON, token for token what
    ``response_format`` ``json_schema`` gives for the same schema (which validates when
    the model closes it inside max_tokens)."""
    assert sglang_case(base, "stag-const", SGLANG_CONST) == (SGLANG_CONST["value"], "stop")
    text, finish = sglang_case(base, "stag-json", SGLANG_JSON)
    assert (text, finish) == sglang_case(base, "stag-plain", SGLANG_JSON, PLAIN_JSON)
    assert text.startswith("{"), text
    if finish == "stop":
        jsonschema.validate(json.loads(text), SGLANG_SCHEMA)


def test_sglangs_cases_through_tito(tito: str) -> None:
    check_sglang_cases(tito)


@pytest.mark.slow
def test_sglangs_cases_through_tito_on_smollm2(real_tito: str) -> None:
    check_sglang_cases(real_tito)


def test_tito_samples_the_format_as_the_engines_chat_route_does(
        tito: str, engine: RunningEngine) -> None:
    fmt = {"type": "tag", "begin": "<a>", "content": {"type": "regex", "pattern": "[a-z]{4}"},
           "end": "</a>"}
    body = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 16,
            "response_format": {"type": "structural_tag", "format": fmt}}
    with httpx.Client(base_url=tito, timeout=120) as http:
        reply = http.post("/sessions/stag-same/v1/chat/completions", json=body)
        assert reply.status_code == 200, reply.text
        seed = int(reply.headers["x-seedproxy-seed"])
        turn = http.get("/sessions/stag-same/trajectory").json()["interactions"][-1]
    direct = httpx.post(f"{engine.url}/v1/chat/completions", timeout=120, json={
        **body, "seed": seed, "return_token_ids": True}).json()["choices"][0]
    assert turn["completion_token_ids"] == direct["response_token_ids"]
    content = reply.json()["choices"][0]["message"]["content"]
    assert re.fullmatch("<a>[a-z]{4}</a>", content), content


@pytest.mark.parametrize("fmt", [
    {"type": "token", "token": 5},
    {"type": "sequence", "elements": [{"type": "any_text"}, NUMBER]},
    {"type": "const_string"},
])
def test_a_bad_format_through_tito_is_an_openai_400(tito: str, fmt: dict[str, Any]) -> None:
    with httpx.Client(base_url=tito, timeout=60) as http:
        r = http.post("/sessions/stag-bad/v1/chat/completions", json={
            "model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4,
            "response_format": {"type": "structural_tag", "format": fmt}})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert "structural_tag" in error["message"] and error["type"], error


def test_the_tokenizer_ids_used_for_bias_are_what_they_name() -> None:
    tok = tiny_tokenizer()
    assert [tok.convert_tokens_to_ids(t) for t in ("Call", ":", ".")] == [CALL, COLON, DOT]
    assert tok.eos_token_id == EOS
