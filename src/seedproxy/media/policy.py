"""What images a client may send: the operator's bounds, and the rule for URLs.

Invariants:
- seedproxy never fetches an image URL itself. Only ``data:`` URLs and base64 sources
  carry an image by default; an ``http(s)://`` URL passes (as sent) only when its host
  is one of ``allowed_hosts`` and it names no user info. ``file://`` URLs, paths and
  other schemes never pass: an SGLang upstream opens whatever it is sent.
- ``decode_image`` accepts base64 of a whole PNG, JPEG, GIF or WebP image within the
  bounds: bytes checked before any decoding, pixels from the header before the pixels
  are decoded (a small file claiming a huge canvas costs nothing), and the image
  accepted only once all its pixels decoded. Pillow and ``hashlib`` release the GIL,
  so ``ImageGate`` runs it in a thread.
"""

from __future__ import annotations

import binascii
import hashlib
import io
from dataclasses import dataclass
from urllib.parse import urlsplit

from PIL import Image, UnidentifiedImageError

from ..errors import BadRequest

__all__ = ["IMAGE_TYPES", "CheckedImage", "ImagePolicy", "check_url", "decode_image"]

IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
"""The media types accepted: those Anthropic's and OpenAI's APIs take."""

_UNSAFE = frozenset("\\@ \t\r\n\x00")
"""Characters a URL parser and an upstream's may read differently (user info,
backslashes, whitespace): a URL holding one never passes."""


@dataclass(frozen=True, slots=True)
class ImagePolicy:
    """Bounds on a request's images (the settings' ``--max-image-bytes`` and the rest)."""

    max_bytes: int
    """Decoded bytes of one image at most (``--max-image-bytes``)."""
    max_pixels: int
    """Width x height of one image at most, read from its header before decoding."""
    max_images: int
    """Images in one request at most (every turn's, as the history resends them)."""
    allowed_hosts: frozenset[str] = frozenset()
    """Hosts whose ``http(s)://`` image URLs are forwarded as sent (lower case)."""


def check_url(url: str, policy: ImagePolicy, param: str) -> None:
    """Refuse (``BadRequest`` on ``param``) a URL that is not ``data:`` and not an
    ``http(s)://`` URL of an allowed host."""
    if url.startswith("data:"):
        return
    shown = url if len(url) <= 80 else url[:77] + "..."
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme in ("http", "https") and policy.allowed_hosts and not (_UNSAFE & set(url)):
        host = urlsplit(url).hostname
        if host is not None and host.lower() in policy.allowed_hosts:
            return
        raise BadRequest(f"image URL {shown!r}: its host is not one this proxy allows "
                         f"(send the image as a data: URL)", param=param)
    raise BadRequest(f"image URL {shown!r} is not accepted: send the image as a data: URL "
                     f"(or base64); seedproxy forwards no URL an upstream would fetch or open",
                     param=param)


_FORMATS = {"PNG": "image/png", "JPEG": "image/jpeg", "GIF": "image/gif", "WEBP": "image/webp"}
_ALIASES = {"image/jpg": "image/jpeg"}
_BROKEN = (OSError, SyntaxError, ValueError, EOFError, Image.DecompressionBombError)
"""What Pillow raises for data that does not decode (truncated, a broken chunk, bad
parameters, a frame past the end, over Pillow's own bound)."""


@dataclass(frozen=True, slots=True)
class CheckedImage:
    """An image that passed the policy; ``sha256`` (hex) is of its decoded bytes."""

    sha256: str
    media_type: str
    width: int
    height: int
    size: int
    base64: str
    """The image's bytes as the client sent them (base64, no ``data:`` prefix)."""

    @property
    def data_url(self) -> str:
        return f"data:{self.media_type};base64,{self.base64}"


def decode_image(payload: str, declared: str | None, policy: ImagePolicy,
                 param: str) -> CheckedImage:
    """Check ``payload`` (base64) against ``policy``; ``declared``: the media type the
    client named (a data URL's, or an Anthropic source's), None when it named none.
    Any refusal is a ``BadRequest`` on ``param``."""
    if declared is not None:
        declared = _ALIASES.get(declared.lower(), declared.lower())
        if declared not in IMAGE_TYPES:
            raise BadRequest(f"image media type {declared!r} is not accepted (one of "
                             f"{', '.join(sorted(IMAGE_TYPES))})", param=param)
    if len(payload) // 4 * 3 > policy.max_bytes + 2:
        raise BadRequest(f"an image is over {policy.max_bytes} bytes", param=param)
    try:
        data = binascii.a2b_base64(payload, strict_mode=True)
    except ValueError:  # binascii.Error, or a ValueError for a character outside ASCII
        raise BadRequest("an image's data is not valid base64", param=param) from None
    if len(data) > policy.max_bytes:
        raise BadRequest(f"an image is over {policy.max_bytes} bytes", param=param)
    media_type, width, height = _decoded(data, policy, param)
    if declared is not None and declared != media_type:
        raise BadRequest(f"an image declared {declared} is {media_type}", param=param)
    return CheckedImage(hashlib.sha256(data).hexdigest(), media_type, width, height,
                        len(data), payload)


def _decoded(data: bytes, policy: ImagePolicy, param: str) -> tuple[str, int, int]:
    """The image's media type and size, once its pixels decoded."""
    try:
        image = Image.open(io.BytesIO(data), formats=list(_FORMATS))
    except UnidentifiedImageError:
        raise BadRequest("an image is not a PNG, JPEG, GIF or WebP image", param=param) from None
    except _BROKEN:
        raise BadRequest("an image's data does not decode", param=param) from None
    with image:
        width, height = image.size
        if width * height > policy.max_pixels:
            raise BadRequest(f"an image of {width}x{height} is over {policy.max_pixels} pixels",
                             param=param)
        try:
            image.load()
        except _BROKEN:
            raise BadRequest("an image's data does not decode", param=param) from None
        assert image.format is not None
        return _FORMATS[image.format], width, height
