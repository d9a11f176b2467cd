"""Upstream dialects. ``BACKENDS`` maps ``--backend`` names to classes."""

from __future__ import annotations

from .base import Backend, Captured, Endpoint, StreamCapture, UpstreamRequest
from .sglang import SGLangBackend

__all__ = [
    "BACKENDS",
    "Backend",
    "Captured",
    "Endpoint",
    "SGLangBackend",
    "StreamCapture",
    "UpstreamRequest",
]

BACKENDS: dict[str, type[Backend]] = {SGLangBackend.name: SGLangBackend}
