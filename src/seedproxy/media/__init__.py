"""Images in client requests: located per protocol, checked against the operator's
policy (no URL an upstream would fetch, bounded bytes, pixels and count), decoded off
the event loop."""

from __future__ import annotations

from .gate import ImageGate
from .policy import CheckedImage, ImagePolicy, decode_image

__all__ = ["CheckedImage", "ImageGate", "ImagePolicy", "decode_image"]
