"""A proxy never serves through itself, and one server joins once: ``seedproxy serve``
(no admin key) in front of fake SGLang servers refuses its own URL as an upstream in
any spelling, refuses a request that comes back to it (one extra hop, then the next
server), and takes a second spelling of a member's URL as that member."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import httpx
import pytest

from tests.helpers.fleet import Fleet
from tests.helpers.relay import Relay
from tests.proxy.test_fleet_control import generate
from tests.proxy.test_fleet_membership import join, leave, members, serve  # noqa: F401
from tests.proxy.test_fleet_replicas import Replica


@pytest.fixture
def relay() -> Iterator[Relay]:
    r = Relay()
    yield r
    r.stop()


def localhost(url: str) -> str:
    return url.replace("127.0.0.1", "localhost")


def test_the_proxys_own_url_is_refused_as_an_upstream_in_any_spelling(
        fleet: Fleet, serve: Callable[..., Replica], relay: Relay) -> None:  # noqa: F811
    a = fleet.servers[0]
    proxy = serve([a.url])
    relay.target = proxy.url
    for url in (proxy.url, localhost(proxy.url) + "/", relay.url):
        refused = join(proxy, url)
        assert refused.status_code == 409, (url, refused.text)
        error = refused.json()["error"]
        assert (error["type"], error["code"], error["param"]) == (
            "conflict_error", "upstream_loop", "url")
        assert "leads back to this proxy" in error["message"]
    assert members(proxy) == [(a.url, "active")]
    # the probe through the relay came back carrying the proxy's mark and was refused
    assert [(path, status) for path, status, _ in relay.answers] == [("/get_server_info", 508)]
    assert generate(proxy.url, "s", [1, 2, 3], 2).status_code == 200
    assert len(a.received) == 1
    assert a.switches.headers[0]["x-seedproxy-hop"] == relay.marks[0]


def test_a_request_that_comes_back_is_refused_and_served_by_the_next_server(
        fleet: Fleet, serve: Callable[..., Replica], relay: Relay) -> None:  # noqa: F811
    """The relay joined as a server while it pointed elsewhere, then turned back at the
    proxy: each request the proxy sends it comes back once, is refused with a 508, and
    is served by the other server; the model server sees each request once."""
    a = fleet.servers[0]
    relay.target = a.url  # a real server behind it at first: it may join
    proxy = serve([a.url])
    assert join(proxy, relay.url).status_code == 201
    relay.target = proxy.url
    relay.answers.clear()
    sessions = [f"loop-{i}" for i in range(12)]
    for session in sessions:
        answer = generate(proxy.url, session, [1, 2, 3], 2)
        assert answer.status_code == 200, answer.text
    assert len(a.received) == len(sessions)
    assert relay.answers, "no session was placed on the relay"
    assert {status for _, status, _ in relay.answers} == {508}
    assert len(relay.answers) <= len(sessions)  # one hop back per request, never more
    error = relay.answers[0][2]["error"]
    assert (error["type"], error["code"]) == ("loop_detected", "upstream_loop")
    assert "came back to the seedproxy that sent it" in error["message"]
    # the refusal takes the route's shape, and only the proxy's own mark is refused
    mark = relay.marks[0]
    assert mark is not None and set(relay.marks) == {mark}
    ask = [{"role": "user", "content": "x"}]
    anthropic = httpx.post(f"{proxy.url}/v1/messages", headers={"x-seedproxy-hop": mark},
                           json={"model": "m", "max_tokens": 2, "messages": ask}, timeout=30)
    assert anthropic.status_code == 508
    assert anthropic.json()["type"] == "error"
    assert anthropic.json()["error"]["type"] == "api_error"
    other = httpx.post(f"{proxy.url}/sessions/{sessions[0]}/v1/chat/completions",
                       headers={"x-seedproxy-hop": "0" * 32}, timeout=30,
                       json={"model": "m", "max_tokens": 2, "messages": ask})
    assert other.status_code == 200, other.text


def test_one_server_under_two_spellings_joins_once(
        fleet: Fleet, serve: Callable[..., Replica]) -> None:  # noqa: F811
    a, b = fleet.servers[:2]
    proxy = serve([a.url])
    assert join(proxy, b.url).status_code == 201
    for spelling in (localhost(b.url), b.url + "/", localhost(b.url) + "/"):
        again = join(proxy, spelling)
        assert again.status_code == 200, again.text
        assert again.json()["url"] == b.url
    assert join(proxy, localhost(a.url)).status_code == 200  # a start-up member too
    assert members(proxy) == [(a.url, "active"), (b.url, "active")]
    gone = leave(proxy, localhost(b.url))
    assert gone.status_code == 200 and gone.json()["url"] == b.url
    assert members(proxy) == [(a.url, "active")]
