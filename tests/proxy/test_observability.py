"""/metrics scrapes and its counters move; one structured log line per request; the
overhead header on proxied answers, errors included."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import httpx
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from seedproxy import derive_seed
from seedproxy.fleet.pool import UpstreamPool
from seedproxy.proxy.logs import _RequestFormatter
from tests.conftest import Fake
from tests.helpers.procs import free_port

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    answer = httpx.get(f"{url}/metrics")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    values = {}
    for family in text_string_to_metric_families(answer.text):
        for sample in family.samples:
            values[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return values


def test_metrics_scrape_and_move(fake: Fake, start_proxy: Callable[..., str]) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    # a session that ranks the dead upstream first fails over to the live one
    ranking = UpstreamPool([fake.url, dead], None)  # type: ignore[arg-type]
    sid = next(f"s{n}" for n in range(100) if ranking.candidates(f"s{n}")[0].url == dead)
    url = start_proxy([fake.url, dead], health_interval_s=60)
    before = scrape(url)
    route = (("route", "/v1/chat/completions"), ("status", "200"), ("upstream", fake.url))
    assert ("seedproxy_requests_total", route) not in before
    with httpx.Client(base_url=url, timeout=30) as http:
        for _ in range(2):
            assert http.post(f"/sessions/{sid}/v1/chat/completions", json=BODY).status_code == 200
        fake.switches.fail_next, fake.switches.fail_status = 1, 400
        assert http.post(f"/sessions/{sid}/v1/chat/completions", json=BODY).status_code == 400
        http.post("/sessions/other/v1/chat/completions", json=BODY)
        http.post("/sessions/other/end")
    after = scrape(url)
    assert after[("seedproxy_requests_total", route)] == 3
    bad = (("route", "/v1/chat/completions"), ("status", "400"), ("upstream", fake.url))
    assert after[("seedproxy_requests_total", bad)] == 1
    assert after[("seedproxy_failovers_total", ())] >= 1
    assert after[("seedproxy_recorded_tokens_total", ())] > 0
    assert after[("seedproxy_open_sessions", ())] == 1
    assert after[("seedproxy_overhead_seconds_count", ())] == 4
    assert after[("seedproxy_upstream_latency_seconds_count", (("upstream", fake.url),))] == 4


def test_one_structured_log_line_per_request(
    fake: Fake, start_proxy: Callable[..., str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="seedproxy.request")
    url = start_proxy([fake.url])
    with httpx.Client(base_url=url, timeout=30) as http:
        http.post("/sessions/log-1/v1/chat/completions", json=BODY)
        http.post("/sessions/log-1/v1/chat/completions", json={**BODY, "stream": True})
        http.post("/v1/chat/completions", json=BODY)
    lines = [
        orjson.loads(_RequestFormatter().format(r))
        for r in caplog.records
        if r.name == "seedproxy.request"
    ]
    assert len(lines) == 3
    first, streamed, anonymous = lines
    assert first["session"] == "log-1" and first["index"] == 0
    assert first["seed"] == [derive_seed("log-1", 0)]
    assert streamed["index"] == 1 and streamed["seed"] == [derive_seed("log-1", 1)]
    assert anonymous["session"] is None and anonymous["index"] is None
    for line in lines:
        assert line["event"] == "request"
        assert line["upstream"] == fake.url and line["status"] == 200
        assert line["proxy_ms"] >= 0 and line["upstream_ms"] > 0


def test_proxy_errors_in_a_session_carry_the_overhead_header(
    fake: Fake, start_proxy: Callable[..., str]
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    url = start_proxy([dead], max_failover=0)
    with httpx.Client(base_url=url, timeout=30) as http:
        unreachable = http.post("/sessions/e/v1/chat/completions", json=BODY)
        assert unreachable.status_code == 503
        assert unreachable.headers["x-seedproxy-request-index"] == "0"
        assert unreachable.headers["x-seedproxy-seed"] == str(derive_seed("e", 0))
        assert float(unreachable.headers["x-seedproxy-overhead-ms"]) >= 0
        bad = http.post("/sessions/e/v1/chat/completions", content=b'{"messages": [')
        assert bad.status_code == 400 and float(bad.headers["x-seedproxy-overhead-ms"]) >= 0
        assert "x-seedproxy-request-index" not in bad.headers
        assert http.get("/sessions/e").json()["next_index"] == 1
    good = start_proxy([fake.url])
    ok = httpx.post(f"{good}/v1/chat/completions", json=BODY)
    assert float(ok.headers["x-seedproxy-overhead-ms"]) >= 0


def test_the_overhead_header_leaves_out_the_time_spent_waiting_on_the_upstream(
    proxy: str, fake: Fake
) -> None:
    """The upstream is held by the test for ``held`` seconds, inside the proxy's wait on
    it; so the proxy's own time is at most (what the client waited) - held. A header
    that forgot to subtract the upstream's time would be about what the client waited."""
    fake.switches.hold = threading.Event()
    answer: list[httpx.Response] = []
    waited: list[float] = []

    with httpx.Client(base_url=proxy, timeout=30) as http:
        assert http.get("/healthz").status_code == 200  # connected: the wait below is the request's

        def send() -> None:
            started = time.monotonic()
            answer.append(http.post("/sessions/oh/v1/chat/completions", json=BODY))
            waited.append(time.monotonic() - started)

        client = threading.Thread(target=send)
        client.start()
        deadline = time.monotonic() + 30
        while not fake.received:
            assert time.monotonic() < deadline
            time.sleep(0.005)
        held_from = time.monotonic()
        time.sleep(0.3)
        held = time.monotonic() - held_from
        fake.switches.hold.set()
        client.join(timeout=30)
    assert answer[0].status_code == 200
    overhead_s = float(answer[0].headers["x-seedproxy-overhead-ms"]) / 1000
    assert 0 <= overhead_s <= waited[0] - held
