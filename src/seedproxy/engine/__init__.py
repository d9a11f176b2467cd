"""seedproxy's embedded CPU inference engine: an SGLang-compatible server whose sampling
follows SGLang's deterministic mode (seeded Gumbel-max; batching never changes a token).
Importing it imports torch and transformers; nothing outside it does.

Before torch loads, ``OMP_WAIT_POLICY`` defaults to ``PASSIVE`` (a set value is kept):
idle OpenMP threads sleep instead of spinning, which changes no result and on a busy
machine leaves the cores to the threads that work.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from .errors import EngineError, RequestError
from .model import EngineModel, load_model
from .server import RunningEngine, create_engine_app, run_engine, start_engine_thread

__all__ = [
    "EngineError",
    "EngineModel",
    "RequestError",
    "RunningEngine",
    "create_engine_app",
    "load_model",
    "run_engine",
    "start_engine_thread",
]
