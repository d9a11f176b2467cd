"""Running the engine app under uvicorn: blocking, or in a background thread.

Invariant: ``start_engine_thread`` returns only once ``GET /health`` answers 200, and
``RunningEngine.stop()`` shuts the server (and with it the worker thread) down.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from dataclasses import dataclass

import httpx
import uvicorn

from .errors import EngineError
from .generator import DEFAULT_CACHE_MB, DEFAULT_MAX_BATCH
from .model import EngineModel, load_model
from .server import create_engine_app
from .worker import StepHook

__all__ = ["RunningEngine", "run_engine", "start_engine_thread"]

logger = logging.getLogger("seedproxy.engine")


@dataclass
class RunningEngine:
    """A live engine in this process. ``url`` is its root (no ``/v1``)."""

    url: str
    server: uvicorn.Server
    thread: threading.Thread

    def stop(self, timeout: float = 30.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=timeout)


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def start_engine_thread(model: EngineModel, host: str = "127.0.0.1", port: int = 0,
                        timeout: float = 60.0, max_batch: int = DEFAULT_MAX_BATCH,
                        cache_mb: int = DEFAULT_CACHE_MB, on_step: StepHook | None = None,
                        api_key: str | None = None) -> RunningEngine:
    """Serve ``model`` from a daemon thread; wait until it answers, then return.
    ``on_step`` runs on the worker thread after each step (a test seam); ``api_key``
    (if given) is required on every route but ``/health``."""
    port = port or _free_port(host)
    app = create_engine_app(model, max_batch=max_batch, cache_mb=cache_mb, on_step=on_step,
                            api_key=api_key)
    config = uvicorn.Config(app, host=host, port=port,
                            log_level="warning", lifespan="on", timeout_keep_alive=30)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="seedproxy-engine-http", daemon=True)
    thread.start()
    url = f"http://{host}:{port}"
    deadline = time.monotonic() + timeout
    while True:
        if not thread.is_alive():
            raise EngineError(f"the engine server on {host}:{port} failed to start")
        try:
            if httpx.get(f"{url}/health", timeout=1.0).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            server.should_exit = True
            raise EngineError(f"the engine server on {host}:{port} did not answer in time")
        time.sleep(0.05)
    logger.info("engine serving %s at %s", model.name, url)
    return RunningEngine(url, server, thread)


def run_engine(host: str, port: int, model_path: str | None,
               max_batch: int = DEFAULT_MAX_BATCH, cache_mb: int = DEFAULT_CACHE_MB) -> None:
    """Load the model and serve it until interrupted (for ``seedproxy engine``)."""
    model = load_model(model_path)
    logger.info("engine serving %s on http://%s:%d", model.name, host, port)
    uvicorn.run(create_engine_app(model, max_batch=max_batch, cache_mb=cache_mb),
                host=host, port=port, log_level="info")
