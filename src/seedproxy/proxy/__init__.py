"""The HTTP surface: a FastAPI app built by ``create_app``, imported on first use, so
that ``seedproxy serve`` binds its port and starts loading the engine before paying for
FastAPI and the pipeline."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import create_app

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from .app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
