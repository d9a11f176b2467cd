"""What images a client may send: the operator's bounds, and the rule for URLs.

Invariants:
- seedproxy never fetches an image URL itself.
- Only ``data:`` URLs and base64 sources carry an image by default. An ``http(s)://``
  URL passes (as sent, to the upstream) only when its host is one of ``allowed_hosts``
  and it names no user info; ``file://`` URLs, paths and every other scheme never pass,
  since an SGLang upstream opens whatever it is sent (``get_image_bytes``).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from ..errors import BadRequest

__all__ = ["IMAGE_TYPES", "ImagePolicy", "check_url"]

IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
"""The media types accepted: those Anthropic's and OpenAI's APIs take."""

_UNSAFE = frozenset("\\@ \t\r\n\x00")
"""Characters a URL parser and an upstream's may read differently (user info,
backslashes, whitespace): a URL holding one never passes."""


@dataclass(frozen=True, slots=True)
class ImagePolicy:
    """Bounds on a request's images (each checked before it is forwarded or rendered);
    the defaults are the settings' (``--max-image-bytes`` and the rest)."""

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
