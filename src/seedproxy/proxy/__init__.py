"""The HTTP surface: a FastAPI app built by ``create_app``. It never imports
``seedproxy.commands`` (the command line), which imports it."""

from __future__ import annotations

from .app import create_app

__all__ = ["create_app"]
