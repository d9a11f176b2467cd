"""A request's slot is taken in one atomic store step: in a content-keyed session the
index and the content occurrence are taken together, so a store failure while seating
(here a real SQLite error, raised by a trigger the test adds to the proxy's file) uses
no index and numbers no occurrence, and the client's 503 agrees with what is stored."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import httpx

from seedproxy.seeds import content_key, content_seeds
from tests.conftest import Fake

BODY = {"model": "m", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]}
REFUSE = ("CREATE TRIGGER refuse BEFORE INSERT ON occurrences "
          "BEGIN SELECT RAISE(ABORT, 'disk says no'); END")


def test_a_store_failure_while_seating_uses_no_index(
    fake: Fake, start_proxy: Callable[..., str], tmp_path: Path
) -> None:
    path = tmp_path / "seat.db"
    url = start_proxy([fake.url], store=f"sqlite:///{path}")
    with httpx.Client(base_url=url, timeout=30) as http:
        made = http.post("/sessions", json={"identity": "seat", "index_by": "content"})
        assert made.status_code == 201, made.text
        with sqlite3.connect(path) as db:
            db.execute(REFUSE)
        failed = http.post("/sessions/seat/v1/chat/completions", json=BODY)
        assert failed.status_code == 503, failed.text
        assert set(failed.json()["error"]) == {"message", "type", "param", "code"}
        assert http.get("/sessions/seat").json()["next_index"] == 0  # nothing was used
        with sqlite3.connect(path) as db:
            db.execute("DROP TRIGGER refuse")
        ok = http.post("/sessions/seat/v1/chat/completions", json=BODY)
        assert ok.status_code == 200, ok.text
        key = content_key("/v1/chat/completions", BODY)
        assert ok.headers["x-seedproxy-request-index"] == "0"
        assert ok.headers["x-seedproxy-seed"] == str(content_seeds("seat", key, 0, 1)[0])
        state = http.get("/sessions/seat").json()
        assert (state["next_index"], state["interactions"]) == (1, 1)
    assert len(fake.received) == 1
