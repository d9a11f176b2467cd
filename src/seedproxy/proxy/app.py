"""The application factory. No module state: everything an app uses is built here
(or passed in) and closed by its lifespan."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from ..dialects import BACKENDS, Backend
from ..error_presenters import OPENAI, errors_for, unexpected
from ..errors import BadRequest, ConfigError, SeedProxyError, error_body
from ..fleet.board import open_board
from ..fleet.control import FleetControl
from ..fleet.pool import UpstreamPool
from ..fleet.state import PauseGate
from ..media import ImageGate, ImagePolicy
from ..pipeline.admission import Admission
from ..pipeline.inflight import InFlight
from ..pipeline.metrics import Metrics
from ..pipeline.offload import Parser
from ..pipeline.replaying import ReplayBook
from ..pipeline.resume import ResumingSender
from ..pipeline.services import Services
from ..pipeline.tracers import open_tracer
from ..sessions import SessionManager, SessionStore, open_store
from ..sessions.eviction import Evictor
from ..settings import Settings
from ..transport.client import UpstreamClient, upstream_client
from ..transport.loop import new_hop
from .access import Access
from .admin import Admin, admin_router
from .fleet_routes import fleet_router
from .hot import HotRoutes, ProxyApp
from .logs import flush_logs
from .replay import Verifier
from .routes import PromptCounter, api_router, server_router, warn_if_no_upstream
from .ui import TokenDecoder, ui_router

if TYPE_CHECKING:
    from ..tito import TitoMode

__all__ = ["create_app", "open_tito_mode"]


def create_app(settings: Settings, *, upstreams: list[str] | None = None,
               store: SessionStore | None = None, client: UpstreamClient | None = None,
               backend: Backend | None = None, tito: TitoMode | None = None,
               prompt_counter: PromptCounter | None = None, engine_url: str | None = None,
               parse_hold: str | None = None, clock: Callable[[], float] = time.time,
               ) -> FastAPI:
    """``upstreams`` overrides ``settings.upstream``; injected ``store`` and ``client``
    are not closed. ``tito``: the token-in-token-out mode, if opened already.
    ``prompt_counter`` enables count_tokens (default: the mode's). ``engine_url``: the
    embedded engine (``GET /fleet``). ``parse_hold``: a test seam (``parse_jobs._wait``).
    ``clock``: wall-clock seconds, for export leases and idleness."""
    urls = upstreams if upstreams is not None else settings.upstream
    if not urls:
        raise ConfigError("no upstream: pass --upstream URL, or run `seedproxy serve` for "
                          "the engine")
    if tito is None and settings.token_in_token_out:
        tito = open_tito_mode(settings)
    if prompt_counter is None and tito is not None:
        prompt_counter = tito.count_prompt
    own_store, own_client = store is None, client is None
    store = store if store is not None else open_store(settings.store)
    hop = new_hop()  # this proxy's mark on what it sends upstream (``transport.loop``)
    client = client or upstream_client(
        read_timeout_s=settings.read_timeout_s, connect_timeout_s=settings.connect_timeout_s,
        max_body_bytes=settings.max_upstream_body_bytes, api_key=settings.upstream_api_key,
        max_connections=settings.max_upstream_connections,
        pool_timeout_s=settings.pool_timeout_s, hop=hop)
    parts = _assemble(settings, urls, store, client, backend, tito, parse_hold)
    owned = [close for close, own in ((client.aclose, own_client), (store.close, own_store))
             if own]
    app = ProxyApp(title="seedproxy", version="0.1.0", lifespan=_lifespan(parts, owned))
    app.hop = hop.encode()
    app.hot = parts.hot
    app.state.sessions = parts.services.sessions
    app.state.pool = parts.services.pool
    _include_routes(app, parts, prompt_counter, engine_url, clock)
    _install_error_handlers(app)
    return app


@dataclass(frozen=True)
class _Parts:
    services: Services
    hot: HotRoutes
    fleet: FleetControl
    access: Access
    client: UpstreamClient


def _assemble(settings: Settings, urls: list[str], store: SessionStore,
              client: UpstreamClient, backend: Backend | None, tito: TitoMode | None,
              parse_hold: str | None) -> _Parts:
    backend = backend or BACKENDS[settings.backend](
        api_key=settings.upstream_api_key, routed_experts=settings.capture_routed_experts)
    sessions = SessionManager(
        store, max_open_sessions=settings.max_open_sessions,
        default_seed=settings.seed if settings.deterministic else None,
        default_index_by=settings.index_by)
    gate = PauseGate(settings.pause_timeout_s)
    pool = UpstreamPool(urls, client, max_failover=settings.max_failover, gate=gate)
    fleet = FleetControl(
        pool, gate, server_info=backend.reports_server_info,
        enforce=settings.deterministic and not settings.allow_nondeterministic_upstream,
        board=open_board(store))
    metrics = Metrics()
    parser = Parser(threshold=settings.offload_parse_bytes,
                    workers=settings.offload_parse_workers, queue=settings.offload_parse_queue,
                    timeout_s=settings.offload_parse_timeout_s,
                    offloaded=metrics.offloaded_parses.inc, hold=parse_hold)
    sender = ResumingSender(pool, gate, parser, max_event_bytes=settings.max_upstream_body_bytes,
                            rids=backend.names_requests, refresh=fleet.refresh)
    services = Services(
        settings=settings, sessions=sessions, backend=backend, pool=pool, sender=sender,
        metrics=metrics, inflight=InFlight(pool, fleet.board),
        replays=ReplayBook(sessions.store), parser=parser, tito=tito,
        tracer=open_tracer(settings.otel), images=ImageGate(ImagePolicy(
            max_bytes=settings.max_image_bytes, max_pixels=settings.max_image_pixels,
            max_images=settings.max_images,
            allowed_hosts=frozenset(host.lower() for host in settings.image_url_hosts))))
    access = Access(sessions, settings.admin_key, settings.max_body_bytes)
    hot = HotRoutes(openai=Admission(services), messages=Admission(services, messages=True),
                    access=access)
    return _Parts(services, hot, fleet, access, client)


def _lifespan(parts: _Parts, owned: Sequence[Callable[[], Awaitable[None]]],
              ) -> Callable[[FastAPI], contextlib.AbstractAsyncContextManager[None]]:
    """Start the fleet and the background tasks; on shutdown stop them, then close the
    parser, the tracer, what the app opened itself (``owned``, in order) and the logs."""
    services, fleet = parts.services, parts.fleet
    settings, pool = services.settings, services.pool

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await fleet.start()
        tasks = [asyncio.create_task(warn_if_no_upstream(pool)),
                 asyncio.create_task(fleet.follow(services.inflight.stop_soon))]
        if fleet.server_info:
            await fleet.inspect()
            tasks.append(asyncio.create_task(fleet.inspect_forever(settings.health_interval_s)))
        tasks.append(asyncio.create_task(pool.probe_forever(settings.health_interval_s)))
        if settings.session_ttl_s is not None:
            evictor = Evictor(services.sessions.store, settings.session_ttl_s)
            tasks.append(asyncio.create_task(evictor.run()))
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await services.parser.close()
            await asyncio.to_thread(services.tracer.close)  # exports the spans still queued
            for close in owned:
                await close()
            flush_logs()

    return lifespan


def _include_routes(app: FastAPI, parts: _Parts, prompt_counter: PromptCounter | None,
                    engine_url: str | None, clock: Callable[[], float]) -> None:
    services, fleet, access = parts.services, parts.fleet, parts.access
    settings, pool, store = services.settings, services.pool, services.sessions.store
    app.include_router(api_router(parts.hot, access, pool, services, prompt_counter))
    app.include_router(admin_router(Admin(
        services.sessions, access, settings.deterministic, services.inflight,
        settings.abandon_after_s, clock)))
    app.include_router(server_router(pool, fleet, access, store))
    app.include_router(fleet_router(
        fleet, Verifier(store, services.backend, pool, services.tito), access,
        engine_url=engine_url))
    app.include_router(ui_router(access, pool, TokenDecoder(parts.client), store))

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/metrics")
    async def metrics_route() -> Response:
        services.metrics.open_sessions.set(await store.count_open())
        return Response(services.metrics.render(),
                        media_type="text/plain; version=0.0.4; charset=utf-8")


def open_tito_mode(settings: Settings, *, tokenizer: Any = None,
                   model_name: str | None = None, embedded: bool = False) -> TitoMode:
    """Token-in-token-out mode from ``settings`` (``ConfigError`` on any problem);
    ``embedded``: in front of the embedded engine, whose llguidance tags force no call
    (``at_least_one`` is not read there): no tool tags are built."""
    from ..tito import open_tito

    dialect = BACKENDS[settings.backend](api_key=settings.upstream_api_key).tito()
    return open_tito(
        dialect=dialect, tokenizer_path=settings.tokenizer,
        tokenizer=tokenizer, chat_template=settings.chat_template,
        tool_parser=settings.tool_parser, reasoning_parser=settings.reasoning_parser,
        model_name=model_name, today=settings.template_date, structural_tags=not embedded,
        matchers=settings.tito_matchers)


def _install_error_handlers(app: FastAPI) -> None:
    """Every error answered by its route's error presenter; FastAPI's own (validation,
    routing) in OpenAI's shape."""

    @app.exception_handler(SeedProxyError)
    async def on_seedproxy_error(request: Request, exc: SeedProxyError) -> Response:
        return errors_for(request.url.path).response(exc)

    @app.exception_handler(RequestValidationError)
    async def on_validation_error(request: Request, exc: RequestValidationError) -> Response:
        first = exc.errors()[0] if exc.errors() else {}
        if first.get("type") == "json_invalid":  # its loc is a character offset, no field
            error = (first.get("ctx") or {}).get("error", "invalid JSON")
            return OPENAI.response(BadRequest(f"request body is not valid JSON: {error}"))
        # loc starts with where the value was: body, query or path
        where = ".".join(str(p) for p in first.get("loc", ())[1:] if p != "body") or None
        message = str(first.get("msg", "invalid request"))
        return OPENAI.response(BadRequest(f"{where}: {message}" if where else message,
                                          param=where))

    @app.exception_handler(HTTPException)
    async def on_http_error(request: Request, exc: HTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return JSONResponse(error_body(str(exc.detail), kind), status_code=exc.status_code,
                            headers=exc.headers)

    @app.exception_handler(Exception)
    async def on_unexpected(request: Request, exc: Exception) -> Response:
        """seedproxy's own bug: logged, a 500 in the route's protocol shape, and the
        connection kept (``ProxyApp`` ends the re-raise that would reset it)."""
        return unexpected(request.url.path)
