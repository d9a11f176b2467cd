"""The one map from an upstream transport failure (``httpx.HTTPError``) to its status.

Invariants, wherever the failure happens (sending, priming, or mid-stream):
- 503 ``NoConnection`` when no connection to the server came free in the pool timeout;
- 504 ``UpstreamTimeout`` for any other timeout;
- 502 ``UpstreamError`` for an answer past ``--max-upstream-body-bytes``;
- 503 ``UpstreamUnavailable`` for a server that could not be reached (a refused or
  failed connect);
- 502 ``UpstreamError`` for anything else (a server that broke its answer).
The message names the upstream and, but for the first three, ``what`` happened.
"""

from __future__ import annotations

import httpx

from ..errors import UpstreamError, UpstreamTimeout, UpstreamUnavailable
from .body import UpstreamBodyTooLarge

__all__ = ["NoConnection", "upstream_failure"]


class NoConnection(UpstreamUnavailable):
    """503: no connection to the server came free within the pool timeout."""


def upstream_failure(url: str, what: str, exc: httpx.HTTPError) -> UpstreamError:
    if isinstance(exc, httpx.PoolTimeout):
        return NoConnection(f"upstream {url}: {exc} (--max-upstream-connections)")
    if isinstance(exc, httpx.TimeoutException):
        return UpstreamTimeout(f"upstream {url} timed out: {type(exc).__name__}")
    if isinstance(exc, UpstreamBodyTooLarge):
        return UpstreamError(f"upstream {url}: {exc} (--max-upstream-body-bytes)")
    if isinstance(exc, httpx.ConnectError):
        return UpstreamUnavailable(f"upstream {url} {what}: {type(exc).__name__}")
    return UpstreamError(f"upstream {url} {what}: {type(exc).__name__}")
