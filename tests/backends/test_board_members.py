"""Fleet membership on the board: the same changes give the same fleet on the local
board and on Redis (a real redis-server), and a replica's ``--upstream`` list is
amended the same way whatever its changes' order."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis

from seedproxy.errors import StoreError
from seedproxy.fleet.board import LocalBoard
from seedproxy.fleet.redis_board import RedisBoard
from seedproxy.fleet.state import FleetBoard, FleetState
from seedproxy.sessions import open_store
from seedproxy.sessions.store.redis import RedisStore
from tests.helpers.redis_server import RedisServer

STARTUP = ["http://a:1", "http://b:1", "http://c:1"]


def test_members_amend_the_startup_list_in_its_order_then_added_by_url() -> None:
    state = FleetState(members=(("http://a:1", False), ("http://e:1", True),
                                ("http://d:1", True), ("http://z:1", False)))
    assert state.members_of(STARTUP) == ["http://b:1", "http://c:1", "http://e:1", "http://d:1"]
    assert FleetState().members_of(STARTUP) == STARTUP


@pytest.fixture(params=["local", "redis"])
async def board(request: pytest.FixtureRequest, redis_url: str) -> AsyncIterator[FleetBoard]:
    if request.param == "local":
        yield LocalBoard()
        return
    store = open_store(redis_url)
    assert isinstance(store, RedisStore)
    yield RedisBoard(store)
    await store.close()


async def test_joins_and_leaves_are_kept_with_every_state(board: FleetBoard) -> None:
    await board.set_member("http://d:1", True)
    await board.set_member("http://a:1", False)
    await board.pause("in_place")
    state = await board.set_member("http://d:1", False)
    assert state.members == (("http://a:1", False), ("http://d:1", False))
    assert state.paused and state.mode == "in_place"
    again = await board.set_member("http://a:1", True)
    assert again.members_of(STARTUP) == STARTUP
    assert (await board.read()) == again
    assert again.seq == 5


async def test_a_member_field_seedproxy_did_not_write_is_a_store_error(
    redis_server: RedisServer, redis_url: str
) -> None:
    store = open_store(redis_url)
    assert isinstance(store, RedisStore)
    board = RedisBoard(store)
    await board.set_member("http://d:1", True)
    direct = redis.Redis.from_url(redis_server.url)
    try:
        direct.hset(redis_url.split("prefix=", 1)[1] + "fleet", "member:http://d:1", "yes")
    finally:
        direct.close()
    with pytest.raises(StoreError, match="a member seedproxy did not write"):
        await board.read()
    await store.close()
