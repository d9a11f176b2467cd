"""One image's bytes checked: base64 that decodes to a whole PNG, JPEG, GIF or WebP
image within the policy's byte and pixel bounds.

Invariants: the byte bound is checked before any decoding, the pixel bound from the
image's header before its pixels are decoded (a small file that claims a huge canvas
costs nothing), and an image is accepted only once all its pixels decoded. Pillow's
decoders and ``hashlib`` release the GIL, so ``ImageGate`` runs this in a thread.
"""

from __future__ import annotations

import binascii
import hashlib
import io
from dataclasses import dataclass

from PIL import Image, UnidentifiedImageError

from ..errors import BadRequest
from .policy import IMAGE_TYPES, ImagePolicy

__all__ = ["CheckedImage", "decode_image"]

_FORMATS = {"PNG": "image/png", "JPEG": "image/jpeg", "GIF": "image/gif", "WEBP": "image/webp"}
_ALIASES = {"image/jpg": "image/jpeg"}
_BROKEN = (OSError, SyntaxError, ValueError, EOFError, Image.DecompressionBombError)
"""What Pillow raises for data that does not decode: OSError (truncated or broken data,
no decoder for its mode), SyntaxError (a broken chunk), ValueError (bad parameters),
EOFError (a frame past the end), DecompressionBombError (over Pillow's own bound)."""


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
