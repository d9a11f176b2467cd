"""Images in client requests: located per protocol, checked against the operator's
policy (no URL an upstream would fetch, bounded bytes, pixels and count), decoded off
the event loop."""

from __future__ import annotations

from .gate import ImageGate, MediaRef, from_url, located
from .policy import IMAGE_TYPES, CheckedImage, ImagePolicy, check_url, decode_image

__all__ = ["IMAGE_TYPES", "CheckedImage", "ImageGate", "ImagePolicy", "MediaRef",
           "check_url", "decode_image", "from_url", "located"]
