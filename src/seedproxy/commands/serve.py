"""Starting servers: the proxy (with the embedded engine when no upstream is given)
and the engine alone."""

from __future__ import annotations

import asyncio
import gc
import importlib
import logging
import math
import os
import secrets
import socket
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import uvicorn

from ..dialects import BACKENDS
from ..errors import ConfigError
from ..proxy.logs import configure_logging
from ..proxy.protocol import guarded_http_protocol
from ..sessions import open_store
from ..settings import Settings, load_settings
from ..transport.client import upstream_client

if TYPE_CHECKING:
    from fastapi import FastAPI

    from ..tito import TitoMode

HOLD_ENGINE_LOAD_VAR = "_SEEDPROXY_HOLD_ENGINE_LOAD"
"""A test seam (not a setting): a FIFO the engine load waits on."""

__all__ = ["HOLD_ENGINE_LOAD_VAR", "bind", "check_before_binding", "run_engine_only", "serve"]

log = logging.getLogger("seedproxy")

_T = TypeVar("_T")


def serve(flags: dict[str, Any], config_file: str | None) -> int:
    """Run the proxy. Every setting is checked before the port is bound, and the port
    before any engine loads; with the embedded engine in one process, the port answers
    while it loads (``proxy/loading.py``)."""
    settings = load_settings(flags, config_file)
    tito = check_before_binding(settings)
    configure_logging()
    sock = bind(settings.host, settings.port)
    # --port 0 binds a free port: from here on the settings name the one bound.
    settings = settings.model_copy(update={"port": sock.getsockname()[1]})
    try:
        if not settings.upstream and settings.workers == 1:
            return _serve_while_loading(settings, sock)
        engine = None
        try:
            if not settings.upstream:
                engine, settings, tito = _embedded(settings)
            app = _proxy_app(settings, tito, engine)
            if settings.upstream and settings.deterministic and BACKENDS[
                    settings.backend].reports_server_info and (
                    not settings.allow_nondeterministic_upstream):
                from .doctor import refuse_nondeterministic

                refuse_nondeterministic(settings.upstream)
            log.info("seedproxy listening on http://%s:%d", settings.host, settings.port)
            if settings.workers > 1:
                return _run_workers(settings, sock, engine)
            gc.freeze()  # the app's own objects: no collection walks them again (bench/compare.py)
            uvicorn.Server(uvicorn.Config(app, **_uvicorn_options(settings))).run(sockets=[sock])
        finally:
            if engine is not None:
                engine.stop()
    finally:
        sock.close()
    return 0


def _serve_while_loading(settings: Settings, sock: socket.socket) -> int:
    started: list[_RunningEngine] = []

    def load() -> FastAPI:
        hold = os.environ.get(HOLD_ENGINE_LOAD_VAR)
        if hold:  # a test seam: the load waits until a writer opened and closed the FIFO
            Path(hold).read_bytes()
        engine, ready, tito = _embedded(settings)
        started.append(engine)
        return _proxy_app(ready, tito, engine)

    loading = in_thread(load, name="seedproxy-engine-load")
    in_thread(lambda: importlib.import_module("seedproxy.proxy.app"), name="seedproxy-imports")
    from ..proxy.loading import LoadingApp

    def stop() -> None:
        server.should_exit = True  # set below, before anything calls this

    gate = LoadingApp(loading, wait_s=settings.engine_load_wait_s, on_failure=stop)
    server = uvicorn.Server(uvicorn.Config(gate, **_uvicorn_options(settings)))
    log.info("seedproxy listening on http://%s:%d (the engine is loading: GET /readyz says "
             "when it is ready)", settings.host, settings.port)
    try:
        server.run(sockets=[sock])
    finally:
        for engine in started:
            engine.stop()
    if gate.failure is not None:
        raise gate.failure
    return 0


def in_thread(fn: Callable[[], _T], *, name: str) -> Future[_T]:
    """``fn`` run on a daemon thread (an exiting process does not wait for it)."""
    future: Future[_T] = Future()

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(fn())
        except BaseException as exc:  # handed over whole: the future's reader raises it
            future.set_exception(exc)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future


def _embedded(settings: Settings) -> tuple[_RunningEngine, Settings, TitoMode | None]:
    """The embedded engine started; the settings and token-in-token-out mode for it."""
    engine = _start_engine(settings.model, settings.engine_max_batch,
                           settings.engine_prefix_cache_mb)
    # The engine's own key: only this proxy may call it (pause, weight version).
    settings = settings.model_copy(update={"upstream_api_key": engine.api_key})
    log.info("embedded engine serving %s at %s (GET /fleet names it; "
             "seedproxy verify-logprobs uses it by default)", engine.model.name, engine.url)
    tito = None
    if settings.token_in_token_out is not False:
        from ..proxy.app import open_tito_mode

        tito = open_tito_mode(settings, tokenizer=engine.model.tokenizer,
                              model_name=engine.model.name, embedded=True)
        settings = settings.model_copy(update={"token_in_token_out": True, "tokenizer":
                                               settings.tokenizer or engine.model.model_path})
    return engine, settings, tito


def _proxy_app(settings: Settings, tito: TitoMode | None,
               engine: _RunningEngine | None) -> FastAPI:
    from ..proxy.app import create_app

    if engine is None:
        return create_app(settings, tito=tito)
    return create_app(settings, upstreams=[engine.url], tito=tito,
                      prompt_counter=engine.counter, engine_url=engine.url)


def _run_workers(settings: Settings, sock: socket.socket,
                 engine: _RunningEngine | None) -> int:
    from ..proxy.factory import APP_FACTORY, export_settings

    sock.close()  # uvicorn's workers bind their own shared socket
    url = engine.url if engine is not None else None
    export_settings(settings.model_copy(update={"upstream": [url] if url else settings.upstream}),
                    engine_url=url)
    uvicorn.run(APP_FACTORY, factory=True, workers=settings.workers,
                **_uvicorn_options(settings))
    return 0


def _uvicorn_options(settings: Settings) -> dict[str, Any]:
    """``protocol.py`` reads ``timeout_keep_alive`` as the head's and body's deadline."""
    return {"host": settings.host, "port": settings.port, "log_level": "warning",
            "timeout_graceful_shutdown": math.ceil(settings.graceful_shutdown_s),
            "http": guarded_http_protocol(), "timeout_keep_alive": settings.client_timeout_s}


def check_before_binding(settings: Settings) -> TitoMode | None:
    """``ConfigError`` for what ``create_app`` or the engine would refuse; the
    token-in-token-out mode for an upstream (opened here)."""
    if settings.workers > 1 and settings.store.startswith("memory:"):
        raise ConfigError(f"--workers {settings.workers} needs a shared store (--store "
                          "redis://...): the memory store is single-process")
    asyncio.run(_open_and_close(settings))
    if not settings.upstream:
        if settings.model and not Path(settings.model).expanduser().exists():
            raise ConfigError(f"model path not found: {settings.model}")
        return None  # token-in-token-out then uses the engine's tokenizer
    from ..proxy.app import open_tito_mode

    return open_tito_mode(settings) if settings.token_in_token_out else None


async def _open_and_close(settings: Settings) -> None:
    await open_store(settings.store).close()
    await upstream_client(read_timeout_s=settings.read_timeout_s,
                          connect_timeout_s=settings.connect_timeout_s).aclose()


def bind(host: str, port: int) -> socket.socket:
    """Bind and listen as uvicorn would (``SO_REUSEADDR``, its backlog), so a client
    that connects once seedproxy says it listens is never refused; ``ConfigError`` for a
    port in use or a foreign address."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


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


@dataclass(frozen=True)
class _RunningEngine:
    url: str
    stop: Callable[[], None]
    model: Any
    counter: Any
    api_key: str


def _start_engine(model_path: str | None, max_batch: int, prefix_cache_mb: int
                  ) -> _RunningEngine:
    engine_module = _import_engine()
    try:
        model = engine_module.load_model(model_path)
    except engine_module.EngineError as exc:
        raise ConfigError(str(exc)) from None
    from seedproxy.engine.tokens import prompt_counter

    api_key = secrets.token_urlsafe(32)  # per process: no other local process has it
    handle = engine_module.start_engine_thread(model, max_batch=max_batch,
                                               cache_mb=prefix_cache_mb, api_key=api_key)
    return _RunningEngine(str(handle.url), handle.stop, model, prompt_counter(model), api_key)


def _import_engine() -> Any:
    try:
        import seedproxy.engine as engine_module
    except ImportError as exc:
        raise ConfigError("the embedded engine needs torch and transformers: pip install -e "
                          f"'.[engine]' ({exc.msg})") from None
    return engine_module
