"""Auth with an admin key: who reaches what, and keys never reach the logs."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest

from seedproxy import derive_seed
from tests.conftest import Fake

ADMIN = "adm-Secret-0123456789"
MSG = [{"role": "user", "content": "hello"}]


@pytest.fixture
def url(fake: Fake, start_proxy: Callable[..., str]) -> str:
    return start_proxy([fake.url], admin_key=ADMIN)


@pytest.fixture
def admin(url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=url, headers={"authorization": f"Bearer {ADMIN}"}, timeout=30) as c:
        yield c


def made(admin: httpx.Client, identity: str) -> dict[str, Any]:
    answer = admin.post("/sessions", json={"identity": identity})
    assert answer.status_code == 201
    return answer.json()["sessions"][0]  # type: ignore[no-any-return]


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def assert_error(answer: httpx.Response, status: int) -> None:
    assert answer.status_code == status, answer.text
    assert set(answer.json()["error"]) == {"message", "type", "param", "code"}


def test_admin_routes_need_the_admin_key(url: str, admin: httpx.Client) -> None:
    assert_error(httpx.post(f"{url}/sessions", json={}), 401)
    assert_error(httpx.post(f"{url}/sessions", json={}, headers=bearer("wrong")), 401)
    # a non-ASCII key is just a wrong key, not a crash
    assert_error(
        httpx.post(f"{url}/sessions", json={}, headers={"authorization": "Bearer été".encode()}),
        401,
    )
    s = made(admin, "a")
    sid = s["session_id"]
    for method, path in [("post", f"/sessions/{sid}/end"), ("post", "/trajectories/export"),
                         ("delete", f"/sessions/{sid}")]:
        kw: dict[str, Any] = {"json": {}} if method == "post" else {}
        assert_error(httpx.request(method, url + path, headers=bearer(s["api_key"]), **kw), 403)
    assert admin.post(f"/sessions/{sid}/end").status_code == 200
    # health, readiness and metrics stay open
    assert httpx.get(f"{url}/healthz").status_code == 200
    assert httpx.get(f"{url}/readyz").status_code == 200
    assert httpx.get(f"{url}/metrics").status_code == 200


def test_openai_routes_need_a_session_key_or_the_admin_key(
    url: str, admin: httpx.Client, fake: Fake
) -> None:
    body = {"model": "m", "messages": MSG}
    assert_error(httpx.post(f"{url}/v1/chat/completions", json=body), 401)
    assert_error(httpx.post(f"{url}/sessions/x/v1/chat/completions", json=body), 401)
    assert_error(httpx.post(f"{url}/v1/chat/completions", json=body, headers=bearer("nope")), 401)
    assert fake.received == []
    ok = admin.post("/sessions/by-admin/v1/chat/completions", json=body)
    assert ok.status_code == 200 and ok.headers["x-seedproxy-seed"] == str(
        derive_seed("by-admin", 0)
    )


def test_a_session_key_reaches_only_its_own_session(url: str, admin: httpx.Client) -> None:
    mine, other = made(admin, "mine"), made(admin, "other")
    sdk = openai.OpenAI(base_url=f"{url}/v1", api_key=mine["api_key"], max_retries=0)
    raw = sdk.chat.completions.with_raw_response.create(model="m", messages=MSG)
    assert raw.headers["x-seedproxy-session"] == "mine"
    assert raw.headers["x-seedproxy-seed"] == str(derive_seed("mine", 0))
    own_path = openai.OpenAI(base_url=mine["base_url"], api_key=mine["api_key"], max_retries=0)
    assert own_path.chat.completions.with_raw_response.create(model="m", messages=MSG).headers[
        "x-seedproxy-request-index"] == "1"
    wrong = openai.OpenAI(base_url=other["base_url"], api_key=mine["api_key"], max_retries=0)
    with pytest.raises(openai.PermissionDeniedError):
        wrong.chat.completions.create(model="m", messages=MSG)
    key = bearer(mine["api_key"])
    assert_error(httpx.get(f"{url}/sessions/other/trajectory", headers=key), 403)
    assert_error(httpx.get(f"{url}/sessions/other", headers=key), 403)
    assert httpx.get(f"{url}/sessions/mine/trajectory", headers=key).json()["session_id"] == "mine"
    # the other session is untouched by the refused request
    assert admin.get("/sessions/other").json()["next_index"] == 0


def test_keys_never_appear_in_logs(
    url: str, admin: httpx.Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    s = made(admin, "logged")
    key = s["api_key"]
    body = {"model": "m", "messages": MSG}
    assert (
        httpx.post(f"{url}/v1/chat/completions", json=body, headers=bearer(key)).status_code == 200
    )
    assert (
        httpx.post(
            f"{url}/sessions/logged/v1/chat/completions", json=body, headers=bearer(key)
        ).status_code
        == 200
    )
    assert (
        httpx.post(f"{url}/v1/chat/completions", json=body, headers=bearer(key + "x")).status_code
        == 401
    )
    assert (
        httpx.post(
            f"{url}/sessions/logged/v1/chat/completions", content=b"{", headers=bearer(key)
        ).status_code
        == 400
    )
    admin.post("/sessions/logged/end")
    text = "\n".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records)
    assert any(
        getattr(r, "session", None) == "logged" for r in caplog.records
    )  # logs were captured
    assert key not in text and ADMIN not in text


def test_a_session_key_cannot_take_its_own_trajectory_out_of_export(
    url: str, admin: httpx.Client
) -> None:
    s = made(admin, "own")
    key = bearer(s["api_key"])
    assert admin.post("/sessions/own/end").status_code == 200
    # reading is fine; consuming for export is the admin's act
    assert httpx.get(f"{url}/sessions/own/trajectory", headers=key).status_code == 200
    assert_error(
        httpx.get(f"{url}/sessions/own/trajectory", params={"wait": "true"}, headers=key), 403
    )
    taken = admin.post("/trajectories/export", json={"count": 1})
    assert [t["session_id"] for t in taken.json()["trajectories"]] == ["own"]
