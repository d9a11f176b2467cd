"""What the SQLite store's file-identity check costs: ``allocate`` calls per second on
one file with the check (every transaction first ``stat``s the path) against the same
store with it off, measured in one run, alternating rounds.

    python bench/store_identity.py [--calls 2000] [--rounds 6]

Run twice: as configured (``synchronous=FULL``, where fsync dominates) and with
``synchronous=OFF``, which leaves the check's CPU cost against the transaction's.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from seedproxy.sessions import SessionRecord
from seedproxy.sessions.store.sqlite import SqliteStore


async def rate(store: SqliteStore, calls: int, session_id: str) -> float:
    start = time.perf_counter()
    for n in range(calls):
        await store.allocate(session_id, digest=b"%d" % n, retry=False, pinned=None)
    return calls / (time.perf_counter() - start)


async def main(calls: int, rounds: int, durable: bool) -> None:
    with tempfile.TemporaryDirectory() as folder:
        store = SqliteStore(str(Path(folder) / "bench.db"))
        if not durable:  # the check's CPU alone, without the fsync that dominates
            await store._run(lambda db: None)
            store._executor.submit(store._db.execute, "PRAGMA synchronous=OFF").result()
        await store.create(SessionRecord("s", "s", "k"))
        checked = store._identity
        on, off = [], []
        for round_ in range(rounds):  # the order flips each round (the WAL grows)
            for check in ((True, False) if round_ % 2 == 0 else (False, True)):
                store._identity = checked if check else None
                (on if check else off).append(await rate(store, calls, "s"))
        await store.close()
    with_check, without = statistics.median(on), statistics.median(off)
    mode = "FULL" if durable else "OFF"
    print(f"synchronous={mode}: allocate/s with the identity check {with_check:.0f}, "
          f"without {without:.0f}: ratio {with_check / without:.3f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    for durable in (True, False):
        asyncio.run(main(args.calls, args.rounds, durable))
