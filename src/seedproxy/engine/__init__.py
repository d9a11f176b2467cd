"""seedproxy's embedded CPU inference engine: an SGLang-compatible server whose sampling
follows SGLang's deterministic mode (seeded Gumbel-max; batching never changes a token).

Importing this package imports torch and transformers; nothing outside it does.

Before torch loads, ``OMP_WAIT_POLICY`` defaults to ``PASSIVE`` (a value already set is
kept): OpenMP threads between two products sleep instead of spinning. That changes no
result (the work and its split among threads are the same), and on a busy machine it
keeps a thread from burning the core its partner needs: a 16-token answer of SmolLM2 on
2 shared cores took 14 s of CPU spinning, 2 s passive. It has no effect when torch was
imported first.
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
