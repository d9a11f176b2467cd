"""Named exports (``session_ids``), in every store: a session named several times is
delivered once, and ``remove`` never deletes a session that is still open."""

from __future__ import annotations

import pytest

from seedproxy.errors import BadRequest
from seedproxy.sessions import SessionStore
from seedproxy.sessions.export import lease_batch
from tests.sessions.test_stores import interaction, rec


async def test_a_session_named_several_times_is_delivered_once(store: SessionStore) -> None:
    for session_id in ("s", "t"):
        assert await store.create(rec(session_id))
        await store.record(session_id, interaction("i0", 0))
        await store.end(session_id)
    batch_id, taken, _, _ = await lease_batch(store, session_ids=["t", "s", "s", "t", "s"])
    assert [r.session_id for r in taken] == ["s", "t"]
    assert await store.ack(batch_id, 0.0)
    taken = (await lease_batch(store, session_ids=["s", "s", "s"])).sessions
    assert [r.session_id for r in taken] == ["s"]  # named: taken whatever its state


async def test_remove_of_an_open_named_session_is_refused_and_deletes_nothing(
    store: SessionStore,
) -> None:
    for session_id in ("done", "live", "idle"):
        assert await store.create(rec(session_id))
        await store.record(session_id, interaction("i0", 0))
    await store.end("done")
    with pytest.raises(BadRequest) as refused:
        await lease_batch(store, session_ids=["done", "live", "idle"], remove=True)
    assert refused.value.param == "remove"
    assert "open session(s) live, idle" in str(refused.value)
    # nothing was leased: every session is still there and can be taken at once
    batch_id, taken, _, _ = await lease_batch(store, session_ids=["done"], remove=True)
    assert [r.session_id for r in taken] == ["done"]
    assert await store.ack(batch_id, 0.0)
    assert await store.get("done") is None
    assert [r.session_id for r in await store.list()] == ["live", "idle"]
    await store.end("live")
    taken = (await lease_batch(store, session_ids=["live"], remove=True)).sessions
    assert [r.session_id for r in taken] == ["live"]
