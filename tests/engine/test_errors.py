"""Bad input is a 400 in SGLang's shapes, never a 500."""

from __future__ import annotations

import httpx
import pytest

pytestmark = pytest.mark.engine


def test_unknown_sampling_param_is_400(client: httpx.Client) -> None:
    r = client.post("/generate", json={"text": "hi", "sampling_params": {"seed": 1}})
    assert r.status_code == 400
    assert "seed" in r.json()["error"]["message"]


def test_string_sampling_seed_is_400(client: httpx.Client) -> None:
    r = client.post("/generate", json={"text": "hi", "sampling_params": {"sampling_seed": "1"}})
    assert r.status_code == 400 and "sampling_seed" in r.json()["error"]["message"]


def test_unknown_top_level_key_is_ignored(client: httpx.Client) -> None:
    r = client.post("/generate", json={"text": "hi", "whatever": 1,
                                       "sampling_params": {"max_new_tokens": 2}})
    assert r.status_code == 200 and len(r.json()["output_ids"]) == 2


def test_prompt_longer_than_context_is_400(client: httpx.Client) -> None:
    r = client.post("/generate", json={"input_ids": [5] * 3000})
    assert r.status_code == 400
    msg = r.json()["error"]["message"]
    assert "3000" in msg and "2048" in msg
    r = client.post("/v1/completions", json={"prompt": [5] * 2100, "max_tokens": 2})
    assert r.status_code == 400
    body = r.json()
    assert body["object"] == "error" and body["code"] == 400
    assert body["type"] == "BadRequestError" and "2100" in body["message"]


@pytest.mark.parametrize("path", ["/generate", "/v1/chat/completions", "/v1/completions"])
def test_malformed_json_is_400(client: httpx.Client, path: str) -> None:
    r = client.post(path, content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400


@pytest.mark.parametrize(("raw", "needle"), [
    (b"{not json", "request body is not valid JSON"),
    (b"[1, 2]", "request body must be a JSON object"),
])
def test_a_body_that_is_no_json_object_is_refused_as_the_proxy_refuses_it(
        client: httpx.Client, raw: bytes, needle: str) -> None:
    r = client.post("/v1/chat/completions", content=raw,
                    headers={"content-type": "application/json"})
    assert r.status_code == 400 and needle in r.json()["message"], r.text


@pytest.mark.parametrize("body", [
    {"messages": "hi"}, {"messages": []}, {"messages": [{"content": "x"}]},
    {"messages": [{"role": "user", "content": "x"}], "seed": "abc"},
    {"messages": [{"role": "user", "content": "x"}], "temperature": -1},
    {"messages": [{"role": "user", "content": "x"}], "top_p": 0},
    {"messages": [{"role": "user", "content": "x"}], "n": 0},
    {"messages": [{"role": "user", "content": "x"}], "max_tokens": "many"},
    [1, 2],
])
def test_bad_chat_bodies_are_400(client: httpx.Client, body: object) -> None:
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 400, r.text
    assert set(r.json()) == {"object", "message", "type", "param", "code"}


def test_models_health_info(client: httpx.Client) -> None:
    assert client.get("/health").status_code == 200
    data = client.get("/v1/models").json()["data"]
    assert data[0]["id"] == "tiny-random-llama"
    info = client.get("/get_model_info").json()
    assert info["is_generation"] is True and "model_path" in info and "tokenizer_path" in info


def test_stop_strings_and_tokens(client: httpx.Client) -> None:
    base = {"text": "Go", "sampling_params": {"max_new_tokens": 12, "sampling_seed": 4}}
    full = client.post("/generate", json=base).json()
    stop_id = full["output_ids"][3]
    r = client.post("/generate", json={"text": "Go", "sampling_params": {
        "max_new_tokens": 12, "sampling_seed": 4, "stop_token_ids": [stop_id]}}).json()
    first = full["output_ids"].index(stop_id)
    assert r["output_ids"] == full["output_ids"][: first + 1]
    assert r["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop_id}
    word = full["text"][len(full["text"]) // 2:][:3]
    r = client.post("/generate", json={"text": "Go", "sampling_params": {
        "max_new_tokens": 12, "sampling_seed": 4, "stop": [word]}}).json()
    assert r["meta_info"]["finish_reason"] == {"type": "stop", "matched": word}
    assert word not in r["text"] and full["text"].startswith(r["text"])


def test_tools_accepted(oai: object) -> None:
    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
    r = oai.chat.completions.create(  # type: ignore[attr-defined]
        model="x", messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=tools, max_tokens=4, seed=1)
    assert r.choices[0].finish_reason == "length"


def test_generate_n_and_batch(client: httpx.Client) -> None:
    r = client.post("/generate", json={"text": ["a", "b"], "sampling_params": {
        "max_new_tokens": 3, "n": 2}}).json()
    assert isinstance(r, list) and len(r) == 4
    assert r[0]["output_ids"] == r[1]["output_ids"]
