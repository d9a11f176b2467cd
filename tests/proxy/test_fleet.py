"""One proxy in front of three fake SGLang servers: sticky routing, failover with
the same seed, recovery, all-down, and no retry once a stream has started."""

from __future__ import annotations

import functools
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from seedproxy import derive_seed
from seedproxy.fleet.pool import rendezvous_order
from tests.helpers.fleet import Fleet
from tests.helpers.replay_fields import strip_documented

SESSIONS = [f"ep-{i}" for i in range(8)]
TURNS = 4


@functools.cache
def sdk(proxy: str, session: str) -> openai.OpenAI:
    """One client per (proxy, session), reused: building a client costs more than a request."""
    return openai.OpenAI(base_url=f"{proxy}/sessions/{session}/v1", api_key="x", max_retries=0)


def ask(
    proxy: str, session: str, messages: list[dict[str, Any]], *, stream: bool
) -> tuple[str, str]:
    """One chat turn; returns (content, the x-seedproxy-upstream header)."""
    c = sdk(proxy, session)
    if not stream:
        raw = c.chat.completions.with_raw_response.create(
            model="m", messages=messages, max_tokens=6
        )
        return raw.parse().choices[0].message.content or "", raw.headers["x-seedproxy-upstream"]
    with c.chat.completions.with_streaming_response.create(
        model="m", messages=messages, max_tokens=6, stream=True
    ) as raw:
        text = "".join(
            chunk.choices[0].delta.content or "" for chunk in raw.parse() if chunk.choices
        )
        return text, raw.headers["x-seedproxy-upstream"]


def rollout(
    proxy: str, *, between_turns: Callable[[int, dict[str, str]], None] | None = None
) -> list[Any]:
    """Run every session for TURNS turns (even sessions stream), end them, export."""
    history: dict[str, list[dict[str, Any]]] = {s: [] for s in SESSIONS}
    for turn in range(TURNS):
        served: dict[str, str] = {}
        for k, session in enumerate(SESSIONS):
            history[session].append({"role": "user", "content": f"turn {turn}"})
            text, served[session] = ask(proxy, session, history[session], stream=k % 2 == 0)
            history[session].append({"role": "assistant", "content": text})
        if between_turns is not None:
            between_turns(turn, served)
    with httpx.Client(base_url=proxy, timeout=30) as http:
        for session in SESSIONS:
            http.post(f"/sessions/{session}/end").raise_for_status()
        exported = http.post("/trajectories/export", json={"count": len(SESSIONS)})
        exported.raise_for_status()
        return exported.json()["trajectories"]  # type: ignore[no-any-return]


def without_upstream(trajectories: list[Any]) -> list[Any]:
    """The export less what legitimately differs between runs: who answered (a failover
    here), and the documented clock fields (``latency_ms``, ``created``, timestamps)."""
    out = []
    for t in trajectories:
        interactions = [
            {k: v for k, v in strip_documented(i).items() if k != "upstream"}
            for i in t["interactions"]
        ]
        out.append({**t, "interactions": interactions})
    return out


def test_a_session_sticks_to_one_server_and_records_it(fleet: Fleet, start_proxy: Any) -> None:
    proxy = start_proxy(fleet.urls, health_interval_s=60)
    for session in SESSIONS:
        served = {
            ask(proxy, session, [{"role": "user", "content": f"q{i}"}], stream=i == 1)[1]
            for i in range(3)
        }
        assert len(served) == 1
        (url,) = served
        assert url == rendezvous_order(session, fleet.urls, str)[0]
        seeds = {derive_seed(session, i) for i in range(3)}
        assert seeds <= {b["seed"] for b in fleet.by_url(url).received}
        others = [s for s in fleet.servers if s.url != url]
        assert not seeds & {b["seed"] for s in others for b in s.received}
        trajectory = httpx.get(f"{proxy}/sessions/{session}/trajectory").json()
        assert [i["upstream"] for i in trajectory["interactions"]] == [url] * 3
    assert len({rendezvous_order(s, fleet.urls, str)[0] for s in SESSIONS}) > 1


def test_requests_without_a_session_are_spread_over_the_servers(
    fleet: Fleet, start_proxy: Any
) -> None:
    proxy = start_proxy(fleet.urls, health_interval_s=60)
    c = openai.OpenAI(base_url=f"{proxy}/v1", api_key="x", max_retries=0)
    for _ in range(6):
        c.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )
    assert [len(s.received) for s in fleet.servers] == [2, 2, 2]


def test_adding_the_fifth_server_moves_a_fifth_of_the_sessions_and_no_other() -> None:
    """Over 2,000 identities the counts are exact: the hash is blake2b of (key, url),
    the same in every process (Python's ``hash()`` would change them on each run)."""
    four = [f"http://gpu{i}:30000" for i in range(4)]
    five = [*four, "http://gpu4:30000"]
    keys = [f"{task}:{sample}" for task in range(500) for sample in range(4)]
    before = {k: rendezvous_order(k, four, str)[0] for k in keys}
    after = {k: rendezvous_order(k, five, str)[0] for k in keys}
    moved = [k for k in keys if before[k] != after[k]]
    assert len(moved) == 410  # 20.5%: about a fifth; modulo hashing would move ~4/5
    assert moved[:5] == ["0:0", "2:2", "3:2", "4:0", "5:1"]
    assert all(after[k] == five[4] for k in moved)
    assert Counter(after.values()) == {five[0]: 368, five[1]: 410, five[2]: 391,
                                       five[3]: 421, five[4]: 410}
    # Removing a server moves only the sessions it held.
    rest = [u for u in five if u != five[2]]
    left = [k for k in keys if rendezvous_order(k, rest, str)[0] != after[k]]
    assert len(left) == 391 and all(after[k] == five[2] for k in left)
    # Order is a pure function of (key, urls): the list order of the urls does not matter.
    assert all(rendezvous_order(k, list(reversed(five)), str)[0] == after[k] for k in keys)


def test_a_server_killed_halfway_changes_nothing_in_the_export(
    fleet: Fleet, start_proxy: Any
) -> None:
    clean = rollout(start_proxy(fleet.urls, health_interval_s=60))
    assert sum(len(t["interactions"]) for t in clean) == len(SESSIONS) * TURNS

    killed: list[str] = []

    def kill_busiest(turn: int, served: dict[str, str]) -> None:
        if turn == TURNS // 2 - 1:
            busiest = Counter(served.values()).most_common(1)[0][0]
            fleet.by_url(busiest).stop()
            killed.append(busiest)

    failed = rollout(start_proxy(fleet.urls, health_interval_s=60), between_turns=kill_busiest)
    assert without_upstream(failed) == without_upstream(clean)
    late = [i for t in failed for i in t["interactions"] if i["request_index"] >= TURNS // 2]
    assert late and all(i["upstream"] != killed[0] for i in late)
    assert any(
        i["upstream"] == killed[0]
        for t in clean
        for i in t["interactions"]
        if i["request_index"] >= TURNS // 2
    )


def test_a_503_fails_over_with_the_same_seed_and_index(fleet: Fleet, start_proxy: Any) -> None:
    proxy = start_proxy(fleet.urls, health_interval_s=60)
    first, second, _ = (fleet.by_url(u) for u in rendezvous_order("ep-9", fleet.urls, str))
    first.switches.fail_next = 1
    raw = sdk(proxy, "ep-9").chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": "hi"}]
    )
    assert raw.headers["x-seedproxy-upstream"] == second.url
    assert raw.headers["x-seedproxy-request-index"] == "0"
    assert first.received == second.received  # byte-for-byte the same body, seed included
    assert second.received[0]["seed"] == derive_seed("ep-9", 0)


def test_a_server_that_comes_back_gets_its_sessions_back(fleet: Fleet, start_proxy: Any) -> None:
    proxy = start_proxy(fleet.urls, health_interval_s=0.05)
    home = fleet.by_url(rendezvous_order("ep-r", fleet.urls, str)[0])
    message = [{"role": "user", "content": "hi"}]
    assert ask(proxy, "ep-r", message, stream=False)[1] == home.url
    home.stop()
    assert ask(proxy, "ep-r", message, stream=False)[1] != home.url
    health = httpx.get(f"{proxy}/healthz")
    assert health.status_code == 200
    home.restart()
    deadline = time.monotonic() + 20
    while ask(proxy, "ep-r", message, stream=False)[1] != home.url:
        assert time.monotonic() < deadline, "the restarted server never got its session back"
        time.sleep(0.05)


def test_all_servers_down_is_a_503_in_openai_shape(fleet: Fleet, start_proxy: Any) -> None:
    proxy = start_proxy(fleet.urls, health_interval_s=60)
    fleet.close()
    answer = httpx.post(
        f"{proxy}/sessions/ep-d/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert answer.status_code == 503
    error = answer.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert "all 3 upstreams failed" in error["message"]
    with pytest.raises(openai.InternalServerError) as raised:
        sdk(proxy, "ep-d").chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}]
        )
    assert raised.value.status_code == 503
    # Both requests reached the upstream stage, so both consumed an index and were recorded.
    trajectory = httpx.get(f"{proxy}/sessions/ep-d/trajectory").json()
    assert [(i["request_index"], i["status"]) for i in trajectory["interactions"]] == [
        (0, 503),
        (1, 503),
    ]


def test_a_stream_broken_after_its_first_bytes_is_not_retried(
    fleet: Fleet, start_proxy: Any
) -> None:
    proxy = start_proxy(fleet.urls, health_interval_s=60)
    for server in fleet.servers:
        server.switches.break_stream_after = 2
        server.switches.token_delay_s = 0.01
    got: list[str] = []
    stream = sdk(proxy, "ep-s").chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=8, stream=True
    )
    with pytest.raises(openai.APIError, match="broke off the stream"):
        for chunk in stream:
            got.append(chunk.choices[0].delta.content or "")
    assert len(got) == 2
    assert fleet.total_received() == 1
    home = rendezvous_order("ep-s", fleet.urls, str)[0]
    (interaction,) = httpx.get(f"{proxy}/sessions/ep-s/trajectory").json()["interactions"]
    assert interaction["status"] == 502
    assert interaction["upstream"] == home


def test_a_stream_that_breaks_before_its_first_byte_fails_over(
    fleet: Fleet, start_proxy: Any
) -> None:
    proxy = start_proxy(fleet.urls, health_interval_s=60)
    message = [{"role": "user", "content": "hi"}]
    clean = ask(proxy, "ep-b", message, stream=True)[0]
    # Same identity (so the same seeds) in a new physical session:
    made = httpx.post(f"{proxy}/sessions", json={"identity": "ep-b"}).json()["sessions"][0]
    assert made["session_id"] == "ep-b-1"
    first, second, _ = (fleet.by_url(u) for u in rendezvous_order("ep-b-1", fleet.urls, str))
    first.switches.break_stream_after = 0
    text, served = ask(proxy, "ep-b-1", message, stream=True)
    assert served == second.url
    assert text == clean
    assert first.received[-1] == second.received[-1]
