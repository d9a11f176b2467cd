"""The application factory. No module state: everything an app uses is built here
(or passed in) and closed by its lifespan."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from ..backends import BACKENDS, Backend
from ..backends.anthropic_bridge import anthropic_error
from ..backends.board import open_board
from ..backends.fleet import FleetControl
from ..backends.http import UpstreamClient
from ..backends.loop import new_hop
from ..backends.media import ImageGate, ImagePolicy
from ..backends.pause import PauseGate
from ..backends.pool import UpstreamPool
from ..errors import (
    ConfigError,
    SeedProxyError,
    StoreError,
    UpstreamError,
    error_body,
)
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
from .access import Access
from .admin import admin_router
from .fleet_routes import fleet_router
from .health import readiness_router, warn_if_no_upstream
from .hot import MESSAGES_PATHS, HotRoutes, ProxyApp
from .logs import flush_logs
from .messages import PromptCounter, messages_router
from .replay import Verifier
from .routes import openai_router
from .server_routes import server_router
from .ui import TokenDecoder, ui_router
from .weight_routes import weight_router

if TYPE_CHECKING:
    from ..backends.tito import TitoMode

__all__ = ["create_app", "open_tito_mode"]

log = logging.getLogger("seedproxy")


def create_app(
    settings: Settings,
    *,
    upstreams: list[str] | None = None,
    store: SessionStore | None = None,
    client: UpstreamClient | None = None,
    backend: Backend | None = None,
    tito: TitoMode | None = None,
    prompt_counter: PromptCounter | None = None,
    engine_url: str | None = None,
    parse_hold: str | None = None,
    clock: Callable[[], float] = time.time,
) -> FastAPI:
    """Build the proxy. ``upstreams`` overrides ``settings.upstream`` (the CLI passes
    the embedded engine's URL); injected ``store`` and ``client`` are not closed.
    ``tito`` is token-in-token-out mode already opened (the embedded engine's
    tokenizer); otherwise ``settings.token_in_token_out`` opens it here.
    ``prompt_counter`` (a tokenizer, e.g. the engine's) enables count_tokens; in
    token-in-token-out mode the mode's renderer counts when none is given.
    ``engine_url`` names the embedded engine (``GET /fleet`` shows it).
    ``parse_hold`` is a test seam: parse workers wait on it (``parse_jobs._wait``).
    ``clock`` (wall-clock seconds) is what exports measure leases and idleness by."""
    urls = upstreams if upstreams is not None else settings.upstream
    if not urls:
        raise ConfigError(
            "no upstream: pass --upstream URL, or run `seedproxy serve` for the engine"
        )
    if tito is None and settings.token_in_token_out:
        tito = open_tito_mode(settings)
    if prompt_counter is None and tito is not None:
        prompt_counter = tito.count_prompt  # the tokenizer is at hand: count with it
    own_store = store is None
    store = store if store is not None else open_store(settings.store)
    own_client = client is None
    hop = new_hop()  # this proxy's mark on what it sends upstream (``backends.loop``)
    client = client or UpstreamClient(
        read_timeout_s=settings.read_timeout_s,
        connect_timeout_s=settings.connect_timeout_s,
        max_body_bytes=settings.max_upstream_body_bytes,
        api_key=settings.upstream_api_key,
        max_connections=settings.max_upstream_connections,
        pool_timeout_s=settings.pool_timeout_s,
        hop=hop,
    )
    backend = backend or BACKENDS[settings.backend](
        api_key=settings.upstream_api_key, routed_experts=settings.capture_routed_experts
    )
    sessions = SessionManager(
        store,
        max_open_sessions=settings.max_open_sessions,
        default_seed=settings.seed if settings.deterministic else None,
        default_index_by=settings.index_by,
    )
    gate = PauseGate(settings.pause_timeout_s)
    pool = UpstreamPool(urls, client, max_failover=settings.max_failover, gate=gate)
    fleet = FleetControl(
        pool, gate, sglang=settings.backend == "sglang",
        enforce=settings.deterministic and not settings.allow_nondeterministic_upstream,
        board=open_board(store),
    )
    metrics = Metrics()
    access = Access(sessions, settings.admin_key)
    parser = Parser(threshold=settings.offload_parse_bytes,
                    workers=settings.offload_parse_workers, queue=settings.offload_parse_queue,
                    timeout_s=settings.offload_parse_timeout_s,
                    offloaded=metrics.offloaded_parses.inc, hold=parse_hold)
    sender = ResumingSender(pool, gate, parser, max_event_bytes=settings.max_upstream_body_bytes,
                            rids=settings.backend == "sglang", refresh=fleet.refresh)
    inflight = InFlight(pool, fleet.board)
    tracer = open_tracer(settings.otel)
    services = Services(
        settings=settings, sessions=sessions, backend=backend, pool=pool, sender=sender,
        metrics=metrics, inflight=inflight, replays=ReplayBook(sessions.store),
        parser=parser, tito=tito, tracer=tracer, images=ImageGate(ImagePolicy(
            max_bytes=settings.max_image_bytes, max_pixels=settings.max_image_pixels,
            max_images=settings.max_images,
            allowed_hosts=frozenset(host.lower() for host in settings.image_url_hosts))),
    )
    openai = Admission(services)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await fleet.start()
        tasks = [asyncio.create_task(warn_if_no_upstream(pool)),
                 asyncio.create_task(fleet.follow(inflight.stop_soon))]
        if fleet.sglang:
            await fleet.inspect()
            tasks.append(asyncio.create_task(fleet.inspect_forever(settings.health_interval_s)))
        tasks.append(asyncio.create_task(pool.probe_forever(settings.health_interval_s)))
        if settings.session_ttl_s is not None:
            tasks.append(asyncio.create_task(Evictor(store, settings.session_ttl_s).run()))
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await parser.close()
            await asyncio.to_thread(tracer.close)  # exports the spans still queued
            if own_client:
                await client.aclose()
            if own_store:
                await store.close()
            flush_logs()

    app = ProxyApp(title="seedproxy", version="0.1.0", lifespan=lifespan)
    app.hop = hop.encode()
    app.hot = HotRoutes(admission=openai, access=access, on_error=on_seedproxy_error)
    app.state.settings = settings
    app.state.sessions = sessions
    app.state.pool = pool
    app.state.fleet = fleet
    app.state.metrics = metrics
    app.include_router(openai_router(openai, access, pool))
    app.include_router(messages_router(Admission(services, messages=True), access,
                                       prompt_counter))
    app.include_router(
        admin_router(
            sessions,
            access,
            deterministic=settings.deterministic,
            max_body_bytes=settings.max_body_bytes,
            inflight=inflight,
            abandon_after_s=settings.abandon_after_s,
            clock=clock,
        )
    )
    app.include_router(readiness_router(pool, store))
    app.include_router(server_router(pool, fleet, access,
                                     max_body_bytes=settings.max_body_bytes))
    app.include_router(fleet_router(
        fleet, Verifier(store, backend, pool, tito), access,
        max_body_bytes=settings.max_body_bytes, engine_url=engine_url,
    ))
    app.include_router(weight_router(fleet, access, max_body_bytes=settings.max_body_bytes))
    app.include_router(
        ui_router(access, pool, TokenDecoder(client), store,
                  max_body_bytes=settings.max_body_bytes)
    )

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/metrics")
    async def metrics_route() -> Response:
        metrics.open_sessions.set(await store.count_open())
        return Response(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    _install_error_handlers(app)
    return app


def open_tito_mode(settings: Settings, *, tokenizer: Any = None,
                   model_name: str | None = None, embedded: bool = False) -> TitoMode:
    """Token-in-token-out mode from ``settings`` (``ConfigError`` on any problem);
    ``embedded``: in front of the embedded engine, whose llguidance tags force no call
    (``at_least_one`` is not read there): no tool tags are built."""
    from ..backends.tito import open_tito

    key = settings.upstream_api_key
    auth = {"authorization": f"Bearer {key}"} if key else {}
    return open_tito(
        backend=settings.backend, auth=auth, tokenizer_path=settings.tokenizer,
        tokenizer=tokenizer, chat_template=settings.chat_template,
        tool_parser=settings.tool_parser, reasoning_parser=settings.reasoning_parser,
        model_name=model_name, today=settings.template_date, structural_tags=not embedded,
        matchers=settings.tito_matchers,
    )


async def on_seedproxy_error(request: Request, exc: SeedProxyError) -> JSONResponse:
    """A refusal outside the pipeline (auth, admin routes) in OpenAI's shape."""
    headers: dict[str, str] = {}
    if exc.retry_after_s is not None:
        headers["retry-after"] = str(exc.retry_after_s)
    if exc.status_code >= 500 and not isinstance(exc, UpstreamError | StoreError):
        log.error("internal error on %s: %s", request.url.path, exc.message)
    return JSONResponse(exc.body(), status_code=exc.status_code, headers=headers)


def _install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(SeedProxyError, on_seedproxy_error)  # type: ignore[arg-type]

    @app.exception_handler(RequestValidationError)
    async def on_validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        if first.get("type") == "json_invalid":  # its loc is a character offset, no field
            error = (first.get("ctx") or {}).get("error", "invalid JSON")
            text = f"request body is not valid JSON: {error}"
            return JSONResponse(error_body(text, "invalid_request_error"), status_code=400)
        where = ".".join(
            str(p) for p in first.get("loc", ())[1:] if p != "body"
        ) or None  # loc starts with where the value was: body, query or path
        message = str(first.get("msg", "invalid request"))
        text = f"{where}: {message}" if where else message
        return JSONResponse(
            error_body(text, "invalid_request_error", param=where), status_code=400
        )

    @app.exception_handler(HTTPException)
    async def on_http_error(request: Request, exc: HTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return JSONResponse(
            error_body(str(exc.detail), kind), status_code=exc.status_code, headers=exc.headers
        )

    @app.exception_handler(Exception)
    async def on_unexpected(request: Request, exc: Exception) -> JSONResponse:
        """seedproxy's own bug: logged, a 500 in the route's protocol shape, and the
        connection kept (``ProxyApp`` ends the re-raise that would reset it)."""
        path = request.url.path
        log.exception("unexpected error on %s", path)
        if path.endswith(MESSAGES_PATHS):
            return JSONResponse(anthropic_error(500, "internal error"), status_code=500)
        return JSONResponse(error_body("internal error", "internal_error"), status_code=500)
