"""Real images for tests: PNGs of a given size, as bytes and as data: URLs."""

from __future__ import annotations

import base64
import io

from PIL import Image

__all__ = ["data_url", "png", "png_url"]


def png(width: int, height: int, color: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    """A ``width`` x ``height`` PNG of one colour (vary ``color`` for distinct images)."""
    out = io.BytesIO()
    Image.new("RGB", (width, height), color).save(out, "PNG")
    return out.getvalue()


def data_url(data: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


def png_url(width: int = 8, height: int = 8, color: tuple[int, int, int] = (200, 30, 30)) -> str:
    return data_url(png(width, height, color))
