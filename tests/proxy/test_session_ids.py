"""Session ids: one rule everywhere (``sessions/ids.py``). Any UTF-8 id within the
rule works by path, ``X-Session-Id`` (raw UTF-8 or percent-encoded) and
``POST /sessions``, and travels percent-encoded in response headers; an id outside
it is a 400 in OpenAI's shape before anything else happens."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import openai
import pytest

from seedproxy.errors import BadRequest
from seedproxy.sessions.ids import check_id, decode_header_id, encode_id
from tests.conftest import Fake

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
SNOWMAN = "%E2%98%83"


def assert_400(answer: httpx.Response, param: str) -> None:
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param


def test_a_non_latin1_id_works_streamed_and_not_by_path_and_header(
    http: httpx.Client, fake: Fake
) -> None:
    plain = http.post(f"/sessions/{SNOWMAN}/v1/chat/completions", json=BODY)
    assert plain.status_code == 200, plain.text
    assert plain.headers["x-seedproxy-session"] == SNOWMAN
    assert plain.headers["x-seedproxy-request-index"] == "0"
    with http.stream(
        "POST", f"/sessions/{SNOWMAN}/v1/chat/completions", json={**BODY, "stream": True}
    ) as streamed:
        lines = [line for line in streamed.iter_lines() if line.startswith("data:")]
    assert streamed.status_code == 200 and lines[-1] == "data: [DONE]"
    assert streamed.headers["x-seedproxy-session"] == SNOWMAN
    assert streamed.headers["x-seedproxy-request-index"] == "1"
    # The same session by header: raw UTF-8 bytes, or percent-encoded as in a path.
    raw = http.post("/v1/chat/completions", json=BODY, headers={"X-Session-Id": "☃".encode()})
    encoded = http.post("/v1/chat/completions", json=BODY, headers={"X-Session-Id": SNOWMAN})
    assert [r.headers["x-seedproxy-request-index"] for r in (raw, encoded)] == ["2", "3"]
    state = http.get(f"/sessions/{SNOWMAN}").json()
    assert (state["session_id"], state["identity"], state["next_index"]) == ("☃", "☃", 4)
    assert len(fake.received) == 4


def test_an_admin_created_unicode_session_works_through_the_sdk(
    http: httpx.Client, proxy: str
) -> None:
    created = http.post("/sessions", json={"session_id": "任务 1:a"})
    assert created.status_code == 201, created.text
    member = created.json()["sessions"][0]
    assert member["base_url"] == f"{proxy}/sessions/%E4%BB%BB%E5%8A%A1%201:a/v1"
    sdk = openai.OpenAI(base_url=member["base_url"], api_key=member["api_key"], max_retries=0)
    answer = sdk.chat.completions.with_raw_response.create(model="m", messages=BODY["messages"])
    assert answer.headers["x-seedproxy-session"] == "%E4%BB%BB%E5%8A%A1%201:a"
    chunks = list(sdk.chat.completions.create(model="m", messages=BODY["messages"], stream=True))
    assert chunks and chunks[-1].choices == [] or chunks[-1].choices[0].finish_reason is not None
    trajectory = http.get("/sessions/%E4%BB%BB%E5%8A%A1%201:a/trajectory").json()
    assert [i["request_index"] for i in trajectory["interactions"]] == [0, 1]
    assert all(i["status"] == 200 for i in trajectory["interactions"])


@pytest.mark.parametrize(
    "bad", ["%0A", "a%0D%0Ab", "%00", "a%09b", "%E2%80%8B", "%FF", "%20a", "%2E%2E"]
)
def test_a_bad_id_in_the_path_is_a_400_before_anything_happens(
    http: httpx.Client, fake: Fake, bad: str
) -> None:
    for stream in (False, True):
        answer = http.post(f"/sessions/{bad}/v1/chat/completions", json={**BODY, "stream": stream})
        assert_400(answer, "session_id")
    assert_400(http.get(f"/sessions/{bad}/v1/models"), "session_id")
    assert_400(http.get(f"/sessions/{bad}"), "session_id")
    assert fake.received == []
    assert http.get("/metrics").status_code == 200
    assert http.get("/healthz").json() == {"status": "ok"}


@pytest.mark.parametrize("bad", [b"%0A", b"a%0D%0Ab", b"%00", b"\xff", b"%FF", b"x" * 129, b"a/b"])
def test_a_bad_x_session_id_is_a_400(http: httpx.Client, fake: Fake, bad: bytes) -> None:
    answer = http.post("/v1/chat/completions", json=BODY, headers={"X-Session-Id": bad})
    assert_400(answer, "X-Session-Id")
    assert fake.received == []


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"session_id": "a\nb"}, "session_id"),
        ({"session_id": "a/b"}, "session_id"),
        ({"session_id": "é" * 65}, "session_id"),
        ({"identity": "a\u2028b"}, "identity"),
        ({"identity": "x" * 97, "group_size": 2}, "identity"),
    ],
)
def test_post_sessions_applies_the_same_rule(
    http: httpx.Client, body: dict[str, object], param: str
) -> None:
    assert_400(http.post("/sessions", json=body), param)
    assert http.get("/metrics").status_code == 200


def test_many_requests_with_bad_or_unicode_ids_leave_the_proxy_serving(
    fake: Fake, start_proxy: Callable[..., str]
) -> None:
    """Once, each streamed non-latin-1 id leaked an upstream connection permit (1024 in
    all) and newline ids dropped the connection; 1,100 of them must change nothing."""
    url = start_proxy([fake.url], max_failover=0)
    with httpx.Client(base_url=url, timeout=30) as http:
        for i in range(1100):
            if i % 2:
                assert_400(
                    http.post("/sessions/%0D%0A/v1/chat/completions", json=BODY), "session_id"
                )
            else:
                answer = http.post(
                    f"/sessions/{SNOWMAN}{i}/v1/chat/completions",
                    json={**BODY, "stream": True, "max_tokens": 1},
                )
                assert answer.status_code == 200
        ok = http.post("/sessions/after/v1/chat/completions", json=BODY, timeout=60)
        assert ok.status_code == 200
    assert len(fake.received) == 551


def test_the_rule() -> None:
    for good in ("17:3", "ep-1", "☃", "任务", "a b", "é" * 64, "x" * 128, "a%b"):
        assert check_id(good, param="p") == good
    for bad in ("", " a", "a ", "a/b", "\x00", "a\nb", "\u200b", "\ufffd", ".", "..", "é" * 65):
        with pytest.raises(BadRequest):
            check_id(bad, param="p")
    assert encode_id("17:3") == "17:3"
    assert encode_id("☃ a%") == "%E2%98%83%20a%25"
    assert decode_header_id("☃".encode()) == decode_header_id(b"%E2%98%83") == "☃"
    assert decode_header_id(encode_id("a%b").encode()) == "a%b"
