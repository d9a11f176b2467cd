"""Loop detection: a proxy that reaches itself through one of its upstreams.

Each proxy draws a random hop mark (``new_hop``) and its upstream client sends it on
every request (``HOP_HEADER``). A request that arrives carrying the proxy's own mark
came back (directly, or through anything that forwards headers): the proxy refuses it
at once (``LOOP_STATUS``, with ``LOOP_HEADER``) without any upstream call, so a loop
costs one extra hop, never a cascade.

Invariants: the mark is 128 random bits, never derived from anything a client sends,
and only the proxy that drew it refuses it; ``is_loop`` recognises only that refusal.
"""

from __future__ import annotations

import secrets

from ..errors import UpstreamLoop
from .body import UpstreamResponse

__all__ = ["HOP_HEADER", "LOOP_HEADER", "LOOP_STATUS", "LOOPED", "is_loop", "new_hop"]

HOP_HEADER = "x-seedproxy-hop"
LOOP_HEADER = "x-seedproxy-loop"
LOOP_STATUS = UpstreamLoop.status_code  # Loop Detected (RFC 5842)
LOOPED = ("it leads back to this proxy (a request sent to it came back here carrying "
          "this proxy's own hop mark): an upstream must be a model server, not this "
          "proxy or anything that forwards to it")


def new_hop() -> str:
    return secrets.token_hex(16)


def is_loop(response: UpstreamResponse) -> bool:
    """Whether ``response`` is a proxy's refusal of its own request come back."""
    return response.status_code == LOOP_STATUS and LOOP_HEADER in response.headers
