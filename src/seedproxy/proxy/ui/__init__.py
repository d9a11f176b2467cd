"""``/ui``: the trajectory viewer, static files plus the small JSON API they need."""

from __future__ import annotations

from .decode import TokenDecoder
from .routes import ui_router

__all__ = ["TokenDecoder", "ui_router"]
