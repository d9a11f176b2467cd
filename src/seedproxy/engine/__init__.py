"""seedproxy's embedded CPU inference engine: an SGLang-compatible server whose sampling
follows SGLang's deterministic mode (seeded Gumbel-max; batching never changes a token).

Importing this package imports torch and transformers; nothing outside it does.

Before torch loads, ``OMP_WAIT_POLICY`` defaults to ``PASSIVE`` (a value already set is
kept): OpenMP threads sleep between products instead of spinning, which changes no result
and on a busy machine keeps a thread from burning the core its partner needs.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from .errors import EngineError, RequestError
from .model import EngineModel, load_model
from .runner import RunningEngine, run_engine, start_engine_thread
from .server import create_engine_app

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
