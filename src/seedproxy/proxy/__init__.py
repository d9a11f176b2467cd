"""The HTTP surface (a FastAPI app built by ``create_app``) and the command line."""

from __future__ import annotations

from .app import create_app

__all__ = ["create_app"]
