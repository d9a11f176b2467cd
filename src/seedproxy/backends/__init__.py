"""Upstream kinds (``kind.py``). ``BACKENDS`` maps ``--backend`` names to their classes,
the one list of names; a new kind is one module here and one entry below."""

from __future__ import annotations

from .base import OPENAI_ENDPOINTS, Captured, Endpoint, StreamCapture, UpstreamRequest
from .kind import Backend
from .openai import OpenAIBackend
from .sglang import SGLangBackend
from .vllm import VLLMBackend

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
