"""The check every request's images pass before anything else is done with the body.

``ImageGate.check`` locates a body's media (``locate.py``), refuses URLs the policy does
not allow and too many images, and decodes each image (``policy.py``)
in a worker thread, off the event loop. A refusal is a ``BadRequest`` raised before the
request is seated: it uses no index, in the route's own error shape.

Invariant: cost per request is the new images' decoding. An image already accepted
(the same base64 text, which an agent's history resends every turn) is known by the
SHA-256 of that text in a bounded LRU (of its facts, not its bytes) and not decoded
again: a request costs a hash of its images' text plus the decoding of new ones.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections import OrderedDict
from dataclasses import replace
from typing import Any

from ..errors import BadRequest
from ..wire.types import Endpoint
from .locate import MediaRef, located
from .policy import CheckedImage, ImagePolicy, check_url, decode_image

__all__ = ["ImageGate"]

_KNOWN = 4096
"""Accepted images remembered (by their base64 text's digest)."""


class ImageGate:
    """Checks requests' images against one ``ImagePolicy``."""

    def __init__(self, policy: ImagePolicy) -> None:
        self.policy = policy
        self._known: OrderedDict[tuple[bytes, str | None], CheckedImage] = OrderedDict()
        self._lock = threading.Lock()

    async def check(self, endpoint: Endpoint, body: dict[str, Any]) -> list[CheckedImage]:
        """The body's images in prompt order, each checked; URLs an operator allowed
        are checked but not in the list (seedproxy holds none of their bytes)."""
        refs = located(endpoint, body)
        if not refs:
            return []
        images = [ref for ref in refs if ref.image]
        if len(images) > self.policy.max_images:
            raise BadRequest(f"{len(images)} images in one request; at most "
                             f"{self.policy.max_images} are accepted", param=images[0].param)
        for ref in refs:
            if ref.url is not None:
                check_url(ref.url, self.policy, ref.param)
        if not any(ref.payload is not None and ref.image for ref in refs):
            return []
        return await asyncio.to_thread(self._decoded, refs)

    def _decoded(self, refs: list[MediaRef]) -> list[CheckedImage]:
        out = []
        for ref in refs:
            if ref.payload is None or not ref.image:
                continue
            key = (hashlib.sha256(ref.payload.encode()).digest(), ref.declared)
            with self._lock:
                known = self._known.get(key)
                if known is not None:
                    self._known.move_to_end(key)
            if known is None:
                known = decode_image(ref.payload, ref.declared, self.policy, ref.param)
                with self._lock:
                    self._known[key] = replace(known, base64="")  # facts, not the bytes
                    if len(self._known) > _KNOWN:
                        self._known.popitem(last=False)
            out.append(replace(known, base64=ref.payload))
        return out
