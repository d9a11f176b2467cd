"""The contract's seed rules, end to end: openai SDK -> proxy -> fake SGLang."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import openai
import orjson
import pytest

from seedproxy import derive_seed
from tests.conftest import Fake
from tests.helpers.procs import free_port

MSG = [{"role": "user", "content": "hello"}]


def client(proxy: str, session: str | None = "ep-1", **kw: Any) -> openai.OpenAI:
    base = f"{proxy}/sessions/{session}/v1" if session else f"{proxy}/v1"
    return openai.OpenAI(base_url=base, api_key=kw.pop("api_key", "unused"), max_retries=0, **kw)


def chat(c: openai.OpenAI, **kw: Any) -> Any:
    return c.chat.completions.with_raw_response.create(
        model="m", messages=kw.pop("messages", MSG), **kw
    )


def test_sdk_session_path_gets_derived_seeds_in_index_order(proxy: str, fake: Fake) -> None:
    c = client(proxy)
    raws = [chat(c) for _ in range(3)]
    assert [r.headers["x-seedproxy-request-index"] for r in raws] == ["0", "1", "2"]
    expected = [derive_seed("ep-1", i) for i in range(3)]
    assert [int(r.headers["x-seedproxy-seed"]) for r in raws] == expected
    assert [b["seed"] for b in fake.received] == expected
    assert all(r.headers["x-seedproxy-session"] == "ep-1" for r in raws)
    assert raws[0].headers["x-seedproxy-upstream"] == fake.url
    assert float(raws[0].headers["x-seedproxy-overhead-ms"]) >= 0


async def test_concurrent_requests_take_distinct_indices_and_the_expected_seeds(
    proxy: str, fake: Fake
) -> None:
    async with openai.AsyncOpenAI(
        base_url=f"{proxy}/sessions/ep-2/v1", api_key="x", max_retries=0
    ) as c:
        raws = await asyncio.gather(
            *(
                c.chat.completions.with_raw_response.create(model="m", messages=MSG)
                for _ in range(8)
            )
        )
    indices = sorted(int(r.headers["x-seedproxy-request-index"]) for r in raws)
    assert indices == list(range(8))
    assert {int(r.headers["x-seedproxy-seed"]) for r in raws} == {
        derive_seed("ep-2", i) for i in range(8)
    }
    assert {b["seed"] for b in fake.received} == {derive_seed("ep-2", i) for i in range(8)}


def test_a_rerun_of_an_identity_gets_a_new_session_with_the_same_seeds(
    http: httpx.Client, proxy: str
) -> None:
    made = [http.post("/sessions", json={"identity": "17:3"}).json() for _ in range(2)]
    ids = [m["sessions"][0]["session_id"] for m in made]
    assert ids == ["17:3", "17:3-1"]
    seeds = []
    for m in made:
        c = openai.OpenAI(base_url=m["sessions"][0]["base_url"], api_key="x", max_retries=0)
        seeds.append([int(chat(c).headers["x-seedproxy-seed"]) for _ in range(2)])
    assert seeds == [[1152644103, 817236710]] * 2


def test_an_explicit_seed_is_kept_and_still_consumes_an_index(proxy: str, fake: Fake) -> None:
    c = client(proxy, "ep-3")
    first = chat(c, seed=7)
    second = chat(c)
    assert fake.received[0]["seed"] == 7
    assert first.headers["x-seedproxy-request-index"] == "0"
    assert first.headers["x-seedproxy-seed"] == "7"
    assert second.headers["x-seedproxy-request-index"] == "1"
    assert fake.received[1]["seed"] == derive_seed("ep-3", 1)


def test_a_pinned_index_uses_its_seed_and_leaves_the_counter(
    proxy: str, fake: Fake, http: httpx.Client
) -> None:
    c = client(proxy, "ep-4")
    pinned = chat(c, extra_headers={"X-Request-Index": "5"})
    plain = chat(c)
    assert pinned.headers["x-seedproxy-request-index"] == "5"
    assert fake.received[0]["seed"] == derive_seed("ep-4", 5)
    assert plain.headers["x-seedproxy-request-index"] == "0"
    again = chat(c, extra_headers={"X-Request-Index": "5"})
    assert again.headers["x-seedproxy-seed"] == str(derive_seed("ep-4", 5))
    state = http.get("/sessions/ep-4").json()
    assert (state["next_index"], state["interactions"]) == (1, 3)


def test_a_bad_pinned_index_is_a_400_and_consumes_nothing(proxy: str, http: httpx.Client) -> None:
    with pytest.raises(openai.BadRequestError):
        chat(client(proxy, "ep-5"), extra_headers={"X-Request-Index": "-2"})
    assert http.get("/sessions/ep-5").status_code == 404  # a 4xx creates no session


def test_no_deterministic_passes_requests_through(fake: Fake, start_proxy: Any) -> None:
    proxy = start_proxy([fake.url], deterministic=False)
    c = client(proxy, "ep-6")
    raw = chat(c)
    chat(c, seed=11)
    assert "seed" not in fake.received[0]
    assert fake.received[1]["seed"] == 11
    assert "x-seedproxy-seed" not in raw.headers
    assert raw.headers["x-seedproxy-request-index"] == "0"


def test_a_request_in_no_session_is_forwarded_without_a_seed(proxy: str, fake: Fake) -> None:
    raw = chat(client(proxy, None))
    assert "seed" not in fake.received[0]
    assert "x-seedproxy-session" not in raw.headers


def test_session_by_bearer_key_and_by_header(http: httpx.Client, proxy: str, fake: Fake) -> None:
    made = http.post("/sessions", json={"identity": "by-key"}).json()["sessions"][0]
    keyed = openai.OpenAI(base_url=f"{proxy}/v1", api_key=made["api_key"], max_retries=0)
    assert chat(keyed).headers["x-seedproxy-session"] == "by-key"
    header = client(proxy, None, default_headers={"X-Session-Id": "by-header"})
    assert chat(header).headers["x-seedproxy-seed"] == str(derive_seed("by-header", 0))
    assert fake.received[-1]["seed"] == derive_seed("by-header", 0)


def test_streaming_chat_and_completions_carry_the_same_tokens_as_non_streaming(proxy: str) -> None:
    a, b = client(proxy, "twin"), client(proxy, "twin-1")
    http = httpx.Client(base_url=proxy)
    http.post("/sessions", json={"session_id": "twin-1", "identity": "twin"})
    whole = a.chat.completions.create(model="m", messages=MSG)
    streamed = b.chat.completions.create(model="m", messages=MSG, stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in streamed if chunk.choices)
    assert text == whole.choices[0].message.content
    whole_c = a.completions.create(model="m", prompt="abc")
    streamed_c = b.completions.create(model="m", prompt="abc", stream=True)
    assert "".join(ch.choices[0].text for ch in streamed_c if ch.choices) == whole_c.choices[0].text


def test_generate_puts_the_seed_in_sampling_params(http: httpx.Client, fake: Fake) -> None:
    r = http.post(
        "/sessions/gen/generate", json={"text": "hi", "sampling_params": {"max_new_tokens": 4}}
    )
    assert r.status_code == 200, r.text
    sent = fake.received[0]
    assert sent["sampling_params"]["sampling_seed"] == derive_seed("gen", 0)
    assert "seed" not in sent["sampling_params"] and "seed" not in sent
    assert "output_token_logprobs" not in r.json()["meta_info"]
    assert len(r.json()["output_ids"]) == 4


def test_upstream_errors_keep_their_status_and_message(http: httpx.Client) -> None:
    r = http.post("/sessions/gen2/generate", json={"text": "hi", "sampling_params": {"seed": 3}})
    assert r.status_code == 400
    assert "unknown sampling_params" in r.json()["error"]["message"]
    assert http.get("/sessions/gen2").json()["next_index"] == 1


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b"{not json", None),
        (b"[1, 2]", None),
        (b'{"model": "m"}', "messages"),
        (b'{"model": "m", "messages": []}', "messages"),
        (b'{"messages": [{"role": "user", "content": "x"}], "seed": "abc"}', "seed"),
        (b'{"messages": [{"role": "user", "content": "x"}], "seed": true}', "seed"),
        (b'{"messages": [{"role": "user", "content": "x"}], "n": 0}', "n"),
        (b'{"messages": [{"role": "user", "content": "x"}], "seed": 18446744073709551616}', "seed"),
        (b'{"messages": [{"role": "user", "content": "x"}], "seed": 9223372036854775808}', "seed"),
        (b'{"messages": [{"role": "user", "content": "x"}], "seed": -9223372036854775809}', "seed"),
        (b'{"messages": [{"role": "user", "content": "x"}], "stream": "yes"}', "stream"),
    ],
)
def test_bad_bodies_get_a_400_and_consume_no_index(
    http: httpx.Client, fake: Fake, body: bytes, param: str | None
) -> None:
    r = http.post(
        "/sessions/bad/v1/chat/completions",
        content=body,
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 400
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param
    if b"922337203685477580" in body or b"18446744073709551616" in body:
        assert "out of range" in error["message"]
    assert fake.received == []
    assert http.get("/sessions/bad").status_code == 404  # a 4xx creates no session


def test_upstream_down_is_a_503_in_openai_shape_and_keeps_its_index(start_proxy: Any) -> None:
    """Nothing listening on the one upstream: no server could be reached, a 503 (502 is
    for an upstream that answered badly)."""
    proxy = start_proxy([f"http://127.0.0.1:{free_port()}"])
    with httpx.Client(base_url=proxy) as http:
        r = http.post("/sessions/down/v1/chat/completions", json={"messages": MSG})
        assert r.status_code == 503
        assert "unreachable" in r.json()["error"]["message"]
        state = http.get("/sessions/down").json()
        assert (state["next_index"], state["interactions"]) == (1, 1)


def test_a_three_turn_conversation_replays_identically_in_a_new_session(
    http: httpx.Client, proxy: str
) -> None:
    def run() -> list[str]:
        made = http.post("/sessions", json={"identity": "convo"}).json()["sessions"][0]
        c = openai.OpenAI(base_url=made["base_url"], api_key="x", max_retries=0)
        messages: list[dict[str, str]] = []
        said = []
        for turn in ("hi", "tell me more", "thanks"):
            messages.append({"role": "user", "content": turn})
            reply = (
                c.chat.completions.create(model="m", messages=messages).choices[0].message.content
            )
            messages.append({"role": "assistant", "content": reply})
            said.append(reply)
        return said

    first, second = run(), run()
    assert first == second
    assert len(set(first)) == 3


def test_capture_keeps_token_ids_out_of_the_body_unless_asked(
    http: httpx.Client, proxy: str
) -> None:
    c = client(proxy, "cap")
    plain = c.chat.completions.create(model="m", messages=MSG)
    assert plain.choices[0].logprobs is None
    dumped = plain.model_dump()
    assert "response_token_ids" not in str(dumped) and "prompt_token_ids" not in str(dumped)
    asked = c.chat.completions.create(model="m", messages=MSG, logprobs=True)
    assert asked.choices[0].logprobs is not None
    trajectory = http.get("/sessions/cap/trajectory").json()
    first = trajectory["interactions"][0]
    assert first["prompt_token_ids"] and len(first["completion_token_ids"]) == 8
    assert len(first["logprobs"]) == 8
    assert first["response"]["choices"][0]["logprobs"] is None


def test_models_are_the_upstreams(proxy: str) -> None:
    assert [m.id for m in client(proxy).models.list()] == ["fake-sglang"]


def test_unknown_session_on_an_admin_route_is_a_404(http: httpx.Client) -> None:
    r = http.get("/sessions/nope")
    assert r.status_code == 404
    assert r.json()["error"]["type"] == "not_found_error"


def test_a_shared_seed_for_a_group_is_a_400(http: httpx.Client) -> None:
    r = http.post("/sessions", json={"identity": "g", "group_size": 4, "seed": 5})
    assert r.status_code == 400
    assert "shared seed" in r.json()["error"]["message"]


def test_a_configured_default_seed_is_refused_for_groups_and_n_but_kept_for_one(
    fake: Fake, start_proxy: Any
) -> None:
    proxy = start_proxy([fake.url], seed=1234)
    with httpx.Client(base_url=proxy) as http:
        group = http.post("/sessions", json={"identity": "grp", "group_size": 2})
        assert group.status_code == 400 and "shared seed" in group.json()["error"]["message"]
        one = http.post("/sessions", json={"identity": "solo"})
        assert one.status_code == 201
    c = client(proxy, "solo")
    with pytest.raises(openai.BadRequestError, match="shared seed"):
        chat(c, n=2)
    assert chat(c).headers["x-seedproxy-seed"] == "1234"
    assert fake.received[-1]["seed"] == 1234
    assert chat(c).headers["x-seedproxy-request-index"] == "1"


def test_without_determinism_a_default_seed_does_not_block_groups(
    fake: Fake, start_proxy: Any
) -> None:
    proxy = start_proxy([fake.url], seed=1234, deterministic=False)
    with httpx.Client(base_url=proxy) as http:
        assert http.post("/sessions", json={"identity": "grp", "group_size": 2}).status_code == 201


def test_a_request_in_no_session_gets_the_upstreams_bytes_verbatim(proxy: str, fake: Fake) -> None:
    body = {"model": "m", "messages": MSG, "logprobs": True}
    direct = httpx.post(f"{fake.url}/v1/chat/completions", json=body)
    proxied = httpx.post(f"{proxy}/v1/chat/completions", json=body)
    assert proxied.status_code == direct.status_code == 200
    # The upstream gives each request its own id (its rid: the proxy's, when it sends
    # one) and reads the clock for ``created``: those are the upstream's too, verbatim.
    ours, theirs = orjson.loads(proxied.content), orjson.loads(direct.content)
    assert ours["id"] == fake.received[-1].get("rid", ours["id"])
    same = direct.content.replace(theirs["id"].encode(), ours["id"].encode()).replace(
        b'"created":%d' % theirs["created"], b'"created":%d' % ours["created"])
    assert proxied.content == same


# Latin-1 bytes, as the server decodes them: b"\xb2" is "²", which str.isdigit() accepts.
NOT_DIGITS = [b"\xb2", b"1\xb9", "١".encode(), b"-1", b"1.0", b"0x1", b"1" * 16]


@pytest.mark.parametrize("value", [*NOT_DIGITS, b""])
def test_an_index_header_that_is_not_ascii_digits_is_a_400(
    http: httpx.Client, value: bytes
) -> None:
    r = http.post(
        "/sessions/idx/v1/chat/completions",
        json={"messages": MSG},
        headers={"X-Request-Index": value},
    )
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "X-Request-Index"


@pytest.mark.parametrize("value", [*NOT_DIGITS, b"x"])
def test_a_retry_count_that_is_not_ascii_digits_is_not_a_retry(
    http: httpx.Client, value: bytes
) -> None:
    first = http.post("/sessions/rc/v1/chat/completions", json={"messages": MSG})
    again = http.post(
        "/sessions/rc/v1/chat/completions",
        json={"messages": MSG},
        headers={"x-stainless-retry-count": value},
    )
    assert again.status_code == 200, again.text
    assert [r.headers["x-seedproxy-request-index"] for r in (first, again)] == ["0", "1"]


@pytest.mark.parametrize(
    ("body", "param", "needle"),
    [
        (b"{bad", None, "not valid JSON"),
        (b'{"identity": "x", "group_size": "two"}', "group_size", "group_size"),
    ],
)
def test_admin_body_errors_name_the_field_or_none(
    http: httpx.Client, body: bytes, param: str | None, needle: str
) -> None:
    r = http.post("/sessions", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["param"] == param and needle in error["message"]
