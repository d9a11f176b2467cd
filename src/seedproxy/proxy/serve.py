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
        engine = _start_engine(settings.model, settings.engine_max_batch,
                               settings.engine_prefix_cache_mb)
        upstreams = [engine.url]
        log.info("embedded engine serving %s at %s", engine.model_name, engine.url)
    try:
        app = create_app(settings, upstreams=upstreams)  # also checks the store URL
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


def run_engine_only(host: str, port: int, model: str | None, max_batch: int | None = None,
                    prefix_cache_mb: int | None = None) -> int:
    configure_logging()
    engine_module = _import_engine()
    if max_batch is not None and not 1 <= max_batch <= 64:
        raise ConfigError(f"--max-batch must be between 1 and 64, got {max_batch}")
    if prefix_cache_mb is not None and prefix_cache_mb < 0:
        raise ConfigError(f"--prefix-cache-mb must be >= 0, got {prefix_cache_mb}")
    extra = {k: v for k, v in (("max_batch", max_batch), ("cache_mb", prefix_cache_mb))
             if v is not None}
    try:
        engine_module.run_engine(host, port, model, **extra)
    except engine_module.EngineError as exc:
        raise ConfigError(str(exc)) from None
    return 0


class _RunningEngine:
    def __init__(self, handle: Any, model_name: str) -> None:
        self.url: str = handle.url
        self.model_name = model_name
        self._handle = handle

    def stop(self) -> None:
        self._handle.stop()


def _start_engine(model_path: str | None, max_batch: int, prefix_cache_mb: int
                  ) -> _RunningEngine:
    engine_module = _import_engine()
    try:
        model = engine_module.load_model(model_path)
    except engine_module.EngineError as exc:
        raise ConfigError(str(exc)) from None
    handle = engine_module.start_engine_thread(model, max_batch=max_batch,
                                               cache_mb=prefix_cache_mb)
    return _RunningEngine(handle, model.name)


def _import_engine() -> Any:
    try:
        import seedproxy.engine as engine_module
    except ImportError as exc:
        raise ConfigError(f"{_ENGINE_EXTRA} ({exc.msg})") from None
    return engine_module
