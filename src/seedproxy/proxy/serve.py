"""Starting servers: the proxy (with the embedded engine when no upstream is given)
and the engine alone."""

from __future__ import annotations

import logging
import math
from typing import Any

import uvicorn

from ..errors import ConfigError
from ..settings import load_settings
from .app import create_app
from .factory import APP_FACTORY, export_settings
from .logs import configure_logging

__all__ = ["run_engine_only", "serve"]

log = logging.getLogger("seedproxy")

_ENGINE_EXTRA = "the embedded engine needs torch and transformers: pip install 'seedproxy[engine]'"


def serve(flags: dict[str, Any], config_file: str | None) -> int:
    settings = load_settings(flags, config_file)
    if settings.workers > 1 and settings.store.startswith("memory:"):
        raise ConfigError(
            f"--workers {settings.workers} needs a shared store (--store redis://...): "
            "the memory store is single-process"
        )
    configure_logging()
    engine = None
    upstreams = settings.upstream
    if not upstreams:
        engine = _start_engine(settings.model)
        upstreams = [engine.url]
        log.info("embedded engine serving %s at %s", engine.model_name, engine.url)
    try:
        counter = engine.counter if engine is not None else None
        # also checks the store URL
        app = create_app(settings, upstreams=upstreams, prompt_counter=counter)
        log.info("seedproxy listening on http://%s:%d", settings.host, settings.port)
        if settings.workers > 1:
            # Each worker imports the factory and rebuilds these settings from the env.
            export_settings(settings.model_copy(update={"upstream": upstreams}))
            uvicorn.run(
                APP_FACTORY,
                factory=True,
                workers=settings.workers,
                host=settings.host,
                port=settings.port,
                log_level="warning",
                timeout_graceful_shutdown=math.ceil(settings.graceful_shutdown_s),
            )
            return 0
        uvicorn.run(
            app,
            host=settings.host,
            port=settings.port,
            log_level="warning",
            timeout_graceful_shutdown=math.ceil(settings.graceful_shutdown_s),
        )
    finally:
        if engine is not None:
            engine.stop()
    return 0


def run_engine_only(host: str, port: int, model: str | None) -> int:
    configure_logging()
    engine_module = _import_engine()
    try:
        engine_module.run_engine(host, port, model)
    except engine_module.EngineError as exc:
        raise ConfigError(str(exc)) from None
    return 0


class _RunningEngine:
    def __init__(self, handle: Any, model_name: str, counter: Any) -> None:
        self.url: str = handle.url
        self.model_name = model_name
        self.counter = counter
        self._handle = handle

    def stop(self) -> None:
        self._handle.stop()


def _start_engine(model_path: str | None) -> _RunningEngine:
    engine_module = _import_engine()
    try:
        model = engine_module.load_model(model_path)
    except engine_module.EngineError as exc:
        raise ConfigError(str(exc)) from None
    from seedproxy.engine.tokens import prompt_counter

    return _RunningEngine(
        engine_module.start_engine_thread(model), model.name, prompt_counter(model)
    )


def _import_engine() -> Any:
    try:
        import seedproxy.engine as engine_module
    except ImportError as exc:
        raise ConfigError(f"{_ENGINE_EXTRA} ({exc.msg})") from None
    return engine_module
