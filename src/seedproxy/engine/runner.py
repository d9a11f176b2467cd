"""Running the engine app under uvicorn: blocking, or in a background thread.

Invariant: ``start_engine_thread`` returns only once the server serves (the worker runs,
the socket accepts), and ``RunningEngine.stop()`` shuts it and its worker down.
"""

from __future__ import annotations

import logging
import socket
import threading
from dataclasses import dataclass

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


def _listening(host: str, port: int) -> socket.socket:
    """A listening socket: connections queue until uvicorn accepts them."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise EngineError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(2048)
    return sock


def start_engine_thread(model: EngineModel, host: str = "127.0.0.1", port: int = 0,
                        timeout: float = 60.0, max_batch: int = DEFAULT_MAX_BATCH,
                        cache_mb: int = DEFAULT_CACHE_MB, on_step: StepHook | None = None,
                        api_key: str | None = None) -> RunningEngine:
    """Serve ``model`` from a daemon thread; return once its server has started."""
    sock = _listening(host, port)
    port = int(sock.getsockname()[1])
    app = create_engine_app(model, max_batch=max_batch, cache_mb=cache_mb, on_step=on_step,
                            api_key=api_key)
    config = uvicorn.Config(app, host=host, port=port,
                            log_level="warning", lifespan="on", timeout_keep_alive=30)
    woken = threading.Event()
    server = _Server(config, woken)

    def run() -> None:
        try:
            server.run(sockets=[sock])
        finally:
            woken.set()  # a failed start wakes the caller too
            sock.close()

    thread = threading.Thread(target=run, name="seedproxy-engine-http", daemon=True)
    thread.start()
    if not woken.wait(timeout):
        server.should_exit = True
        raise EngineError(f"the engine server on {host}:{port} did not start in time")
    if not server.started:
        raise EngineError(f"the engine server on {host}:{port} failed to start")
    url = f"http://{host}:{port}"
    logger.info("engine serving %s at %s", model.name, url)
    return RunningEngine(url, server, thread)


class _Server(uvicorn.Server):
    """uvicorn's server, setting ``started_event`` once it serves."""

    def __init__(self, config: uvicorn.Config, started_event: threading.Event) -> None:
        super().__init__(config)
        self._started_event = started_event

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            self._started_event.set()


def run_engine(host: str, port: int, model_path: str | None,
               max_batch: int = DEFAULT_MAX_BATCH, cache_mb: int = DEFAULT_CACHE_MB) -> None:
    """Load the model and serve it until interrupted (for ``seedproxy engine``)."""
    model = load_model(model_path)
    logger.info("engine serving %s on http://%s:%d", model.name, host, port)
    uvicorn.run(create_engine_app(model, max_batch=max_batch, cache_mb=cache_mb),
                host=host, port=port, log_level="info")
