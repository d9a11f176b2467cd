"""The replay chain in every store: a resumed session's request at index i is answered
from the record only when index i-1 was, decided first, so requests that arrive out of
order (concurrent ones) never make a session jump back into the record."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from seedproxy.dialects import Endpoint
from seedproxy.pipeline.replaying import ReplayBook
from seedproxy.pipeline.request import client_request, decode_body
from seedproxy.sessions import Interaction, SessionRecord, SessionStore, open_store


def body(word: str) -> bytes:
    return orjson.dumps({"model": "m", "prompt": word})


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> SessionStore:
    if request.param == "memory":
        return open_store("memory://")
    if request.param == "sqlite":
        return open_store(f"sqlite:///{tmp_path / 's.db'}")
    return open_store(request.getfixturevalue("redis_url"))


async def test_a_request_that_came_before_its_predecessor_goes_live_and_so_do_later_ones(
        store: SessionStore) -> None:
    await store.create(SessionRecord("src", "src", "k1"))
    for index in range(4):
        await store.record("src", Interaction(
            f"i{index}", index, [index], "/v1/completions", orjson.loads(body(str(index))),
            {"choices": []}))
    resumed = SessionRecord("src-1", "src", "k2", replays={"session": "src", "at": None})
    await store.create(resumed)
    book = ReplayBook(store)

    async def lookup(index: int) -> bool:
        raw = body(str(index))
        client = client_request(Endpoint.COMPLETIONS, raw, decode_body(Endpoint.COMPLETIONS, raw))
        found = await book.lookup(resumed, index, f"i{index}", client, pinned=False,
                                  streamable=True)
        return found is not None

    assert await lookup(0) is True
    assert await lookup(2) is False  # arrived before index 1 was decided
    assert await lookup(1) is True  # earlier than the divergence: still from the record
    assert await lookup(2) is False  # a retry of 2 gets the same answer
    assert await lookup(3) is False  # after a live request, never back into the record
    await store.close()
