"""Upstream dialects: one class per kind of server (``kind.py``). ``BACKENDS`` maps every
name of ``settings.BACKEND_NAMES`` to its class; a new kind is one module here, one
entry below and its name there."""

from __future__ import annotations

from ..wire.types import OPENAI_ENDPOINTS, Captured, Endpoint, StreamCapture, UpstreamRequest
from .kind import Backend
from .sglang import SGLangBackend
from .tracked import OpenAIBackend, VLLMBackend

__all__ = [
    "BACKENDS",
    "Backend",
    "Captured",
    "Endpoint",
    "OPENAI_ENDPOINTS",
    "OpenAIBackend",
    "SGLangBackend",
    "StreamCapture",
    "UpstreamRequest",
    "VLLMBackend",
]

BACKENDS: dict[str, type[Backend]] = {
    backend.name: backend for backend in (SGLangBackend, VLLMBackend, OpenAIBackend)
}
