"""The one map from an upstream transport failure (an ``httpx.HTTPError``) to
seedproxy's ``UpstreamError`` family, applied at the seam (``LeanClient``'s calls and
``Body``'s reads) and nowhere else, wherever the failure happens: 503 ``NoConnection``
(no connection came free in the pool timeout), 504 ``UpstreamTimeout`` (any other
timeout), 503 ``UpstreamUnavailable`` (a refused or failed connect), else 502
``UpstreamError``. The message names the upstream and, but for the first two, ``what``
happened; the transport's error is chained as ``__cause__`` (``cause``).
"""

from __future__ import annotations

import httpx

from ..errors import UpstreamError, UpstreamTimeout, UpstreamUnavailable

__all__ = ["NoConnection", "cause", "upstream_failure"]


class NoConnection(UpstreamUnavailable):
    """503: no connection to the server came free within the pool timeout."""


def upstream_failure(url: str, what: str, exc: httpx.HTTPError) -> UpstreamError:
    if isinstance(exc, httpx.PoolTimeout):
        return NoConnection(f"upstream {url}: {exc} (--max-upstream-connections)")
    if isinstance(exc, httpx.TimeoutException):
        return UpstreamTimeout(f"upstream {url} timed out: {type(exc).__name__}")
    if isinstance(exc, httpx.ConnectError):
        return UpstreamUnavailable(f"upstream {url} {what}: {type(exc).__name__}")
    return UpstreamError(f"upstream {url} {what}: {type(exc).__name__}")


def cause(exc: UpstreamError) -> BaseException:
    """The transport's failure behind ``exc`` (``exc`` itself when none is chained)."""
    return exc.__cause__ or exc
