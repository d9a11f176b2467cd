"""GET /sessions (the viewer's list) and POST /ui/api/detokenize over real HTTP."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from tests.conftest import Fake
from tests.helpers.fake_compat import create_fake_openai
from tests.helpers.fake_sglang import detok
from tests.helpers.servers import ServerThread

ADMIN = "listing-admin"
AUTH = {"authorization": f"Bearer {ADMIN}"}


def chat(proxy: str, session: str, key: str = ADMIN) -> None:
    answer = httpx.post(
        f"{proxy}/sessions/{session}/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
        headers={"authorization": f"Bearer {key}"},
    )
    assert answer.status_code == 200, answer.text


def test_the_list_pages_filters_and_reports_state(
    fake: Fake, start_proxy: Callable[..., str]
) -> None:
    proxy = start_proxy([fake.url], admin_key=ADMIN)
    group = httpx.post(proxy + "/sessions", json={"identity": "t", "group_size": 3}, headers=AUTH)
    members = group.json()["sessions"]
    chat(proxy, "t:0")
    chat(proxy, "t:0")
    chat(proxy, "solo")
    httpx.post(proxy + "/sessions/t:1/end", headers=AUTH).raise_for_status()
    taken = httpx.post(proxy + "/trajectories/export", json={"session_ids": ["t:2"]}, headers=AUTH)
    httpx.post(proxy + "/trajectories/ack", json={"batch_id": taken.json()["batch_id"]},
               headers=AUTH).raise_for_status()  # exported once acknowledged

    page = httpx.get(proxy + "/sessions", params={"limit": 2}, headers=AUTH).json()
    assert [s["session_id"] for s in page["sessions"]] == ["t:0", "t:1"]
    assert page["total"] == 4 and page["next_offset"] == 2
    first = page["sessions"][0]
    assert first["interactions"] == 2 and first["state"] == "open"
    assert first["upstream"] == fake.url and first["group_id"] == group.json()["group_id"]
    rest = httpx.get(proxy + "/sessions", params={"offset": 2}, headers=AUTH).json()
    assert [(s["session_id"], s["state"]) for s in rest["sessions"]] == [
        ("t:2", "exported"),
        ("solo", "open"),
    ]
    assert rest["next_offset"] is None
    assert page["sessions"][1]["state"] == "ended"

    by_group = httpx.get(
        proxy + "/sessions", params={"group_id": group.json()["group_id"]}, headers=AUTH
    ).json()
    assert by_group["total"] == 3
    by_identity = httpx.get(proxy + "/sessions", params={"identity": "solo"}, headers=AUTH)
    assert [s["session_id"] for s in by_identity.json()["sessions"]] == ["solo"]

    assert httpx.get(proxy + "/sessions").status_code == 401
    session_key = {"authorization": f"Bearer {members[0]['api_key']}"}
    refused = httpx.get(proxy + "/sessions", headers=session_key)
    assert refused.status_code == 403 and refused.json()["error"]["message"]
    own = httpx.get(proxy + "/sessions/t:0", headers=session_key)
    assert own.status_code == 200 and own.json()["exported"] is False
    assert httpx.get(proxy + "/sessions/t:1", headers=session_key).status_code == 403
    for bad in ({"limit": 0}, {"limit": 501}, {"offset": -1}):
        answer = httpx.get(proxy + "/sessions", params=bad, headers=AUTH)
        assert answer.status_code == 400 and answer.json()["error"]["type"]


def test_detokenize_decodes_through_the_upstream_or_says_it_cannot(
    fake: Fake, start_proxy: Callable[..., str]
) -> None:
    proxy = start_proxy([fake.url])
    chat(proxy, "d")
    ids = httpx.get(proxy + "/sessions/d/trajectory").json()["interactions"][0][
        "completion_token_ids"
    ]
    answer = httpx.post(proxy + "/ui/api/detokenize", json={"ids": ids + [ord("<")]})
    assert answer.json()["tokens"] == {str(i): detok([i]) for i in [*ids, ord("<")]}
    too_many = httpx.post(proxy + "/ui/api/detokenize", json={"ids": [1] * 8193})
    assert too_many.status_code == 400

    with ServerThread(create_fake_openai()) as plain:  # no /detokenize there
        other = start_proxy([plain.url], backend="openai")
        answer = httpx.post(other + "/ui/api/detokenize", json={"ids": [5, 6]})
        assert answer.status_code == 200 and answer.json() == {"tokens": None}


def test_pages_follow_a_cursor_and_an_unchanged_list_answers_its_version_alone(
    fake: Fake, start_proxy: Callable[..., str]
) -> None:
    proxy = start_proxy([fake.url], admin_key=ADMIN)
    for name in ("p0", "p1", "p2", "p3", "p4"):
        chat(proxy, name)
    seen, cursor = [], None
    while True:
        params = {"limit": 2} if cursor is None else {"limit": 2, "cursor": cursor}
        page = httpx.get(proxy + "/sessions", params=params, headers=AUTH).json()
        seen.append([s["session_id"] for s in page["sessions"]])
        assert page["total"] == 5
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [["p0", "p1"], ["p2", "p3"], ["p4"]]

    version = page["version"]
    quiet = httpx.get(proxy + "/sessions", params={"since": version}, headers=AUTH)
    assert quiet.json() == {"version": version, "changed": False}
    chat(proxy, "p1")  # one more interaction: what the list shows changed
    moved = httpx.get(proxy + "/sessions", params={"since": version}, headers=AUTH).json()
    assert moved["changed"] is True and moved["version"] != version
    assert [s["interactions"] for s in moved["sessions"]] == [1, 2, 1, 1, 1]
    for bad in ({"cursor": -1}, {"cursor": 2**62 + 1}, {"since": "x"}):
        answer = httpx.get(proxy + "/sessions", params=bad, headers=AUTH)
        assert answer.status_code == 400 and answer.json()["error"]["type"]


def test_an_offset_past_any_store_is_a_400_not_a_500() -> None:
    """A huge ``offset`` once reached the memory store's ``islice`` and was a 500."""
    from seedproxy.proxy import create_app
    from seedproxy.sessions import MemoryStore
    from seedproxy.settings import Settings
    from tests.helpers.servers import ServerThread

    app = create_app(Settings(upstream=["http://127.0.0.1:9"]), store=MemoryStore())
    with ServerThread(app) as proxy:
        answer = httpx.get(f"{proxy.url}/sessions", params={"offset": 2**63}, timeout=30)
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["param"] in ("offset", None)
        assert httpx.get(f"{proxy.url}/sessions", params={"offset": 10**12},
                         timeout=30).json()["sessions"] == []
