"""At-least-once export delivery over real HTTP: a batch is leased until acknowledged,
comes back (same trajectories, same order) when its lease runs out, leaves for good on
ack; ``remove`` deletes on ack only; a client whose read fails loses nothing; two
replicas on one Redis never share a session; SQLite leases survive a restart.

No sleeps: a tiny ``visibility_timeout_s`` and a poll with a generous bound."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson
import pytest

from seedproxy.proxy import create_app
from seedproxy.settings import Settings
from tests.conftest import Fake
from tests.helpers.servers import ServerThread

MSG = [{"role": "user", "content": "hello"}]
TINY = 0.2  # seconds: a lease meant to run out


def ended_group(http: httpx.Client, identity: str, size: int, *, turns: int = 1) -> list[str]:
    made = http.post("/sessions", json={"identity": identity, "group_size": size}).json()
    ids = [s["session_id"] for s in made["sessions"]]
    for sid in ids:
        for _ in range(turns):
            answer = http.post(f"/sessions/{sid}/v1/chat/completions", json={"messages": MSG})
            assert answer.status_code == 200
    for sid in reversed(ids):  # they end in reverse: order must still be creation order
        assert http.post(f"/sessions/{sid}/end").status_code == 200
    return ids


def export(http: httpx.Client, **body: Any) -> dict[str, Any]:
    answer = http.post("/trajectories/export", json=body)
    assert answer.status_code == 200, answer.text
    data: dict[str, Any] = answer.json()
    assert set(data) == {"batch_id", "open_sessions", "waiting_on", "skipped",
                         "trajectories"} and data["batch_id"]
    assert type(data["open_sessions"]) is int
    return data


def ids_of(batch: dict[str, Any]) -> list[str]:
    return [t["session_id"] for t in batch["trajectories"]]


def ack(http: httpx.Client, batch_id: str) -> httpx.Response:
    return http.post("/trajectories/ack", json={"batch_id": batch_id})


def redelivered(http: httpx.Client, bound_s: float = 30.0, **body: Any) -> dict[str, Any]:
    """Export until something comes back (a lease ran out); a bound, not a timing test."""
    deadline = time.monotonic() + bound_s
    while True:
        batch = export(http, **body)
        if batch["trajectories"]:
            return batch
        assert time.monotonic() < deadline, "the lease never ran out"
        time.sleep(0.02)


def test_a_live_lease_is_not_exported_again_and_one_that_runs_out_comes_back_the_same(
    http: httpx.Client,
) -> None:
    ids = ended_group(http, "again", 4, turns=2)
    first = export(http, group_id="again", count=3, visibility_timeout_s=300)
    assert ids_of(first) == ids[:3]
    assert ids_of(export(http, group_id="again")) == ids[3:]  # only what no lease holds
    quick = export(http, session_ids=[ids[3]], visibility_timeout_s=TINY)
    assert ids_of(quick) == []  # named, but under a live lease: not handed out twice
    ids2 = ended_group(http, "again2", 3, turns=2)
    short = export(http, group_id="again2", visibility_timeout_s=TINY)
    assert ids_of(short) == ids2
    back = redelivered(http, group_id="again2", visibility_timeout_s=300)
    assert back["batch_id"] != short["batch_id"]
    assert back["trajectories"] == short["trajectories"]  # same records, same order
    assert export(http, group_id="again2")["trajectories"] == []  # leased again, 300 s


def test_redelivery_keeps_the_order_in_non_deterministic_mode(
    fake: Fake, start_proxy: Callable[..., str]
) -> None:
    with httpx.Client(base_url=start_proxy([fake.url], deterministic=False), timeout=30) as http:
        ids = ended_group(http, "nd", 3)  # ended in reverse: end order is ids[::-1]
        short = export(http, count=3, visibility_timeout_s=TINY)
        assert ids_of(short) == ids[::-1]
        assert redelivered(http, count=3, visibility_timeout_s=300)["trajectories"] == \
            short["trajectories"]


def test_an_acknowledged_batch_never_comes_back_and_ack_is_idempotent(http: httpx.Client) -> None:
    ids = ended_group(http, "acked", 2)
    taken = export(http, session_ids=[ids[0]], visibility_timeout_s=TINY)
    assert ack(http, taken["batch_id"]).status_code == 200
    again = ack(http, taken["batch_id"])
    assert again.status_code == 200 and again.json()["batch_id"] == taken["batch_id"]
    # a second lease, taken after the first, runs out later: once it comes back, the
    # acknowledged one's lease is long gone too, and it did not come back.
    export(http, session_ids=[ids[1]], visibility_timeout_s=TINY)
    assert ids_of(redelivered(http, group_id=taken["trajectories"][0]["group_id"])) == [ids[1]]
    assert http.get(f"/sessions/{ids[0]}").json()["exported"] is True
    assert http.get(f"/sessions/{ids[1]}").json()["exported"] is False  # not acknowledged
    assert ack(http, taken["batch_id"]).status_code == 200  # still idempotent


def test_an_unknown_batch_is_a_404_and_bad_fields_are_400(http: httpx.Client) -> None:
    unknown = ack(http, "batch-nope")
    assert unknown.status_code == 404
    assert set(unknown.json()["error"]) == {"message", "type", "param", "code"}
    assert unknown.json()["error"]["type"] == "not_found_error"
    for body in ({}, {"batch_id": ""}, {"batch_id": 7}, {"batch_id": "b", "extra": 1}):
        answer = http.post("/trajectories/ack", json=body)
        assert answer.status_code == 400, body
    for bad in (0, -1, 86401, "soon", None):
        answer = http.post("/trajectories/export", json={"visibility_timeout_s": bad})
        assert answer.status_code == 400, bad
        assert answer.json()["error"]["param"] == "visibility_timeout_s"
    (sid,) = ended_group(http, "badvis", 1)
    bad_wait = http.get(f"/sessions/{sid}/trajectory",
                        params={"wait": "true", "visibility_timeout_s": "0"})
    assert bad_wait.status_code == 400


def test_remove_deletes_on_ack_never_before(http: httpx.Client) -> None:
    ids = ended_group(http, "rm", 2)
    short = export(http, group_id="rm", remove=True, visibility_timeout_s=TINY)
    assert ids_of(short) == ids
    assert all(http.get(f"/sessions/{s}").status_code == 200 for s in ids)  # not yet
    back = redelivered(http, group_id="rm", remove=True)
    assert back["trajectories"] == short["trajectories"]
    assert all(http.get(f"/sessions/{s}").status_code == 200 for s in ids)
    assert ack(http, back["batch_id"]).status_code == 200
    assert all(http.get(f"/sessions/{s}").status_code == 404 for s in ids)
    assert ack(http, back["batch_id"]).status_code == 200  # idempotent, nothing left to do
    assert ack(http, short["batch_id"]).status_code == 200  # the first delivery: delivered


def test_a_client_that_never_reads_the_answer_loses_nothing(proxy: str, http: httpx.Client) -> None:
    ids = ended_group(http, "cut", 2)
    body = orjson.dumps({"group_id": "cut", "visibility_timeout_s": TINY})
    where = urlsplit(proxy)
    with socket.create_connection((where.hostname, where.port), timeout=10) as sock:
        sock.sendall(b"POST /trajectories/export HTTP/1.1\r\nhost: x\r\n"
                     b"content-type: application/json\r\ncontent-length: "
                     + str(len(body)).encode() + b"\r\n\r\n" + body)
        sock.shutdown(socket.SHUT_RDWR)  # gone before the answer
    assert ids_of(redelivered(http, group_id="cut")) == ids


def test_a_client_that_times_out_mid_wait_loses_nothing(proxy: str, http: httpx.Client) -> None:
    made = http.post("/sessions", json={"identity": "slow", "group_size": 2}).json()
    ids = [s["session_id"] for s in made["sessions"]]
    with httpx.Client(base_url=proxy, timeout=0.3) as impatient, pytest.raises(httpx.ReadTimeout):
        impatient.post("/trajectories/export", json={
            "group_id": "slow", "count": 2, "timeout_s": 30, "visibility_timeout_s": TINY})
    for sid in ids:  # the abandoned export may still be waiting, and lease them
        http.post(f"/sessions/{sid}/end")
    assert ids_of(redelivered(http, group_id="slow", count=2, timeout_s=1)) == ids


def test_wait_true_leases_a_batch_of_one_taken_out_only_on_ack(http: httpx.Client) -> None:
    a, b = ended_group(http, "wt", 2)
    short = http.get(f"/sessions/{a}/trajectory",
                     params={"wait": "true", "visibility_timeout_s": TINY})
    assert short.status_code == 200 and short.json()["batch_id"]
    assert short.json()["session_id"] == a
    # the export waits for both: b is free, a's lease runs out (never acknowledged)
    back = export(http, group_id="wt", count=2, timeout_s=30)
    assert ids_of(back) == [a, b]  # back in the batch export, in creation order
    assert ack(http, back["batch_id"]).status_code == 200
    taken = http.get(f"/sessions/{a}/trajectory", params={"wait": "true"}).json()
    # (named: an exported session may be taken again by name, as with session_ids)
    assert ack(http, taken["batch_id"]).status_code == 200
    assert export(http, group_id="wt")["trajectories"] == []


def _replica(fake: Fake, store: str) -> ServerThread:
    return ServerThread(create_app(Settings(upstream=[fake.url], store=store))).start()


def test_two_replicas_on_one_redis_never_export_the_same_session(
    fake: Fake, redis_url: str
) -> None:
    """Several exporters on each of two replicas drain one group at once: every session
    is delivered exactly once (the replicas select the same prefix; one lease wins)."""
    one, two = _replica(fake, redis_url), _replica(fake, redis_url)
    try:
        with httpx.Client(base_url=one.url, timeout=60) as http:
            ids = ended_group(http, "race", 30)
        exporters = [one.url, two.url] * 3
        got: list[list[list[str]]] = [[] for _ in exporters]
        start = threading.Barrier(len(exporters))

        def drain(i: int) -> None:
            with httpx.Client(base_url=exporters[i], timeout=60) as client:
                start.wait()
                while batch := ids_of(export(client, group_id="race", count=2, timeout_s=0)):
                    got[i].append(batch)

        threads = [threading.Thread(target=drain, args=(i,)) for i in range(len(exporters))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        taken = [s for batches in got for batch in batches for s in batch]
        assert sorted(taken) == sorted(ids)  # each exactly once, none lost
        assert len(taken) == len(set(taken))
        for batches in got:  # each exporter's batches in creation order
            flat = [s for batch in batches for s in batch]
            assert flat == sorted(flat, key=ids.index)
    finally:
        one.stop()
        two.stop()


def test_sqlite_leases_and_acks_survive_a_restart(fake: Fake, tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'sessions.db'}"
    first = _replica(fake, store)
    try:
        with httpx.Client(base_url=first.url, timeout=30) as http:
            ids = ended_group(http, "disk", 3)
            acked = export(http, group_id="disk", count=1)
            assert ids_of(acked) == ids[:1] and ack(http, acked["batch_id"]).status_code == 200
            short = export(http, group_id="disk", count=1, visibility_timeout_s=TINY)
            long = export(http, group_id="disk", count=1, visibility_timeout_s=3600)
            assert (ids_of(short), ids_of(long)) == ([ids[1]], [ids[2]])
    finally:
        first.stop()
    second = _replica(fake, store)  # a restarted proxy on the same file
    try:
        with httpx.Client(base_url=second.url, timeout=30) as http:
            back = redelivered(http, group_id="disk")
            assert back["trajectories"] == short["trajectories"]  # only the run-out lease
            assert export(http, group_id="disk")["trajectories"] == []
            assert ack(http, acked["batch_id"]).status_code == 200  # remembered
            assert ack(http, long["batch_id"]).status_code == 200
            state = {s: http.get(f"/sessions/{s}").json()["exported"] for s in ids}
            assert state == {ids[0]: True, ids[1]: False, ids[2]: True}
    finally:
        second.stop()


def test_ack_needs_what_export_needs(fake: Fake, start_proxy: Callable[..., str]) -> None:
    url = start_proxy([fake.url], admin_key="ack-admin")
    admin = {"authorization": "Bearer ack-admin"}
    made = httpx.post(f"{url}/sessions", json={"identity": "auth"}, headers=admin).json()
    session_key = {"authorization": f"Bearer {made['sessions'][0]['api_key']}"}
    httpx.post(f"{url}/sessions/auth/end", headers=admin).raise_for_status()
    taken = httpx.post(f"{url}/trajectories/export", json={}, headers=admin).json()
    body = {"batch_id": taken["batch_id"]}
    for headers, status in (({}, 401), ({"authorization": "Bearer wrong"}, 401),
                            (session_key, 403)):
        answer = httpx.post(f"{url}/trajectories/ack", json=body, headers=headers)
        assert answer.status_code == status
        assert set(answer.json()["error"]) == {"message", "type", "param", "code"}
    assert httpx.get(f"{url}/sessions/auth", headers=admin).json()["exported"] is False
    assert httpx.post(f"{url}/trajectories/ack", json=body, headers=admin).status_code == 200
    assert httpx.get(f"{url}/sessions/auth", headers=admin).json()["exported"] is True
