"""The boundary for upstream answers of an unexpected shape.

Backends read upstream JSON defensively, but an answer can still be shaped nothing
like the dialect promised (a list for a chat completion, a string for a message).
Reading it then raises one of ``SHAPE_ERRORS``; the request path turns that into a
502 naming the upstream, never a 500 from the proxy's own code.
"""

from __future__ import annotations

from ..errors import UpstreamError

__all__ = ["SHAPE_ERRORS", "malformed_answer"]

SHAPE_ERRORS = (AttributeError, TypeError, KeyError, IndexError, ValueError)


def malformed_answer(upstream: str | None) -> UpstreamError:
    return UpstreamError(f"upstream {upstream} answered with an unexpected shape")
