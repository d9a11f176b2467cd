"""The app factory that ``uvicorn --workers N`` imports in every worker process: the
parent hands its ``Settings`` to the workers as ``SEEDPROXY_*`` variables
(``settings_env``), from which each rebuilds them (``app_from_env``)."""

from __future__ import annotations

import gc
import os

from fastapi import FastAPI

from ..settings import ENV_PREFIX, Settings, load_settings
from .app import create_app
from .logs import configure_logging

__all__ = ["APP_FACTORY", "app_from_env", "export_settings", "settings_env"]

APP_FACTORY = "seedproxy.proxy.factory:app_from_env"
ENGINE_URL_VAR = "_SEEDPROXY_EMBEDDED_ENGINE"
"""The parent's embedded engine, for the workers' ``GET /fleet`` (not a setting)."""


def settings_env(settings: Settings) -> dict[str, str]:
    """``SEEDPROXY_*`` variables that rebuild exactly ``settings`` (None: unset)."""
    def text(value: object) -> str:
        if isinstance(value, list):
            return ",".join(value)
        return ("true" if value else "false") if isinstance(value, bool) else str(value)

    return {ENV_PREFIX + name.upper(): text(value)
            for name, value in settings.model_dump().items() if value is not None}


def export_settings(settings: Settings, engine_url: str | None = None) -> None:
    """Put ``settings`` (and the embedded engine's URL) in this process's environment for
    its workers to inherit."""
    for key in [k for k in os.environ if k.startswith(ENV_PREFIX)]:
        del os.environ[key]
    os.environ.update(settings_env(settings))
    os.environ.pop(ENGINE_URL_VAR, None)
    if engine_url is not None:
        os.environ[ENGINE_URL_VAR] = engine_url


def app_from_env() -> FastAPI:
    configure_logging()
    app = create_app(load_settings({}), engine_url=os.environ.get(ENGINE_URL_VAR))
    gc.freeze()  # as ``seedproxy serve`` does in one process
    return app
