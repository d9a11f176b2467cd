"""Writes that replicas hold before they count: a store script followed by Redis's
``WAIT numreplicas timeout`` on the same connection.

Invariants: ``WAIT`` counts the replicas that acknowledged the writes of the connection
that sends it, so the script and ``WAIT`` travel in one pipeline (one connection, one
round trip). Replication is one ordered stream: a replica that acknowledged this write
holds every write the primary made before it, on any connection. When fewer replicas
than asked acknowledge within the timeout the call is a ``StoreError`` (503): the write
may yet be on the primary (Redis cannot take it back), and a retry of the request (its
``x-stainless-retry-count``) finds its index again by the retry memory and replaces it.
"""

from __future__ import annotations

import builtins
from typing import Any

from ...errors import StoreError

__all__ = ["run_waited"]


async def run_waited(
    client: Any, script: Any, *, keys: builtins.list[Any], args: builtins.list[Any],
    replicas: int, wait_s: float,
) -> Any:
    """``script`` (a registered ``AsyncScript``) run on ``client``, then ``WAIT replicas``
    for at most ``wait_s``; its result once enough replicas hold the write."""
    from redis.exceptions import NoScriptError

    wait_ms = max(1, int(wait_s * 1000))

    def pipeline() -> Any:
        pipe = client.pipeline(transaction=False)
        pipe.evalsha(script.sha, len(keys), *keys, *args)
        pipe.wait(replicas, wait_ms)
        return pipe

    try:
        result, acked = await pipeline().execute()
    except NoScriptError:  # a restarted or new primary: load it and send again (never ran)
        script.sha = await client.script_load(script.script)
        result, acked = await pipeline().execute()
    if int(acked) < replicas:
        raise StoreError(
            f"Redis store: the write reached {int(acked)} of the {replicas} replica(s) "
            f"wait_replicas asks for within {wait_s:g}s; not acknowledged")
    return result
