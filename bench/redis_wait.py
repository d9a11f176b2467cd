"""What ``wait_replicas`` costs the Redis store: a turn's two writes (``allocate`` then
``record``, each acknowledged after ``WAIT 1``) against the same store with it off, on
one primary and one replica (``redis-server`` on loopback), in one run, alternating
rounds; at 1 session writing and at ``--concurrency`` sessions writing at once.

    python bench/redis_wait.py [--turns 400] [--rounds 4] [--concurrency 32]

On loopback a replica acknowledges within its next replication read, so this is the
floor: across a network each ``WAIT`` adds a round trip to the slowest replica asked.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from array import array
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from seedproxy.sessions import SessionRecord, SessionStore, open_store  # noqa: E402
from seedproxy.sessions.interaction import Interaction  # noqa: E402
from tests.helpers.redis_sentinel import wait_synced  # noqa: E402
from tests.helpers.redis_server import RedisServer, redis_or_skip  # noqa: E402


async def turns_per_s(store: SessionStore, sessions: list[str], turns: int) -> float:
    """Turns per second, ``turns`` split over ``sessions`` writing at once (25 each at
    least)."""

    async def one(session: str, count: int) -> None:
        for n in range(count):
            slot = await store.allocate(session, digest=b"%d" % n, retry=False, pinned=None)
            await store.record(session, Interaction(
                interaction_id=slot.interaction_id, request_index=slot.index,
                seeds=[slot.index], endpoint="chat", request={"n": n},
                response={"text": "x" * 200}, prompt_token_ids=array("i", range(64))))

    start = time.perf_counter()
    each = max(25, turns // len(sessions))
    await asyncio.gather(*(one(s, each) for s in sessions))
    return each * len(sessions) / (time.perf_counter() - start)


async def measure(base: str, turns: int, rounds: int, width: int) -> tuple[float, float]:
    stores = {wait: open_store(f"{base}?prefix=w{wait}:&wait_replicas={wait}")
              for wait in (0, 1)}
    rates: dict[int, list[float]] = {0: [], 1: []}
    for round_ in range(-1, rounds):  # round -1 warms up (connections made), unrecorded
        for wait in ((0, 1) if round_ % 2 == 0 else (1, 0)):
            sessions = [f"r{round_}-{k}" for k in range(width)]
            for session in sessions:
                await stores[wait].create(SessionRecord(session, session, f"k-{session}"))
            rate = await turns_per_s(stores[wait], sessions, turns)
            if round_ >= 0:
                rates[wait].append(rate)
    for store in stores.values():
        await store.close()
    return statistics.median(rates[0]), statistics.median(rates[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    binary = redis_or_skip()
    primary = RedisServer(binary)
    replica = RedisServer(binary, "--replicaof", "127.0.0.1", str(primary.port))
    wait_synced(primary.port, 1)
    try:
        print("| sessions writing | turns/s, WAIT off | turns/s, wait_replicas=1 | ratio |")
        print("| --- | --- | --- | --- |", flush=True)
        for width in (1, args.concurrency):
            off, on = asyncio.run(measure(primary.url, args.turns, args.rounds, width))
            print(f"| {width} | {off:.0f} | {on:.0f} | {on / off:.2f} |", flush=True)
    finally:
        replica.stop()
        primary.stop()


if __name__ == "__main__":
    main()
