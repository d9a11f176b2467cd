"""The check every request's images pass before anything else is done with the body:
``located`` finds its media, the policy (``policy.py``) refuses URLs it does not allow
and too many images, and each image is decoded in a worker thread. A refusal is a
``BadRequest`` raised before the request is seated (it uses no index).

Invariant: a request costs a hash of its images' text plus the decoding of new ones.
An accepted image (the same base64 text, which an agent's history resends every turn)
is known by that text's SHA-256 in a bounded LRU (of its facts, not its bytes).

``located`` finds media per client protocol, in prompt order: chat ``image_url`` parts
(and ``video_url`` / ``audio_url``, whose URLs an SGLang upstream fetches as well),
Anthropic ``image`` blocks (tool results' included), Responses ``input_image`` parts,
``/generate``'s ``image_data`` (and ``video_data``, ``audio_data``). Shapes the protocol
translators refuse are left to them.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from ..errors import BadRequest
from ..wire.types import Endpoint
from .policy import CheckedImage, ImagePolicy, check_url, decode_image

__all__ = ["ImageGate", "MediaRef", "located"]

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
        images = [ref for ref in refs if ref.image]
        if len(images) > self.policy.max_images:
            raise BadRequest(f"{len(images)} images in one request; at most "
                             f"{self.policy.max_images} are accepted", param=images[0].param)
        for ref in refs:
            if ref.url is not None:
                check_url(ref.url, self.policy, ref.param)
        sent = [ref for ref in images if ref.payload is not None]
        return await asyncio.to_thread(self._decoded, sent) if sent else []

    def _decoded(self, refs: list[MediaRef]) -> list[CheckedImage]:
        out = []
        for ref in refs:
            assert ref.payload is not None
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


@dataclass(frozen=True, slots=True)
class MediaRef:
    """One image (or other medium) as the client named it: a base64 ``payload`` (with
    the media type it ``declared``, if any), or a ``url`` that is not a data URL."""

    param: str
    payload: str | None = None
    declared: str | None = None
    url: str | None = None
    image: bool = True
    """False for audio and video: only their URLs are checked."""


def from_url(url: Any, param: str, *, image: bool = True) -> MediaRef:
    """A URL string as a ``MediaRef``: a base64 data URL's payload, or the URL."""
    if not isinstance(url, str):
        raise BadRequest("an image URL must be a string", param=param)
    if not url.startswith("data:"):
        return MediaRef(param, url=url, image=image)
    head, sep, payload = url.partition(",")
    if not sep or not head.endswith(";base64"):
        raise BadRequest("a data: URL medium must be base64 (data:<type>;base64,...)",
                         param=param)
    return MediaRef(param, payload=payload, declared=head[5:-7] or None, image=image)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _chat(body: dict[str, Any]) -> Iterator[MediaRef]:
    for message in _list(body.get("messages")):
        content = message.get("content") if isinstance(message, dict) else None
        for part in _list(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind not in ("image_url", "video_url", "audio_url"):
                continue
            field = part.get(kind)
            url = field.get("url") if isinstance(field, dict) else field
            yield from_url(url, "messages", image=kind == "image_url")


def _anthropic(body: dict[str, Any]) -> Iterator[MediaRef]:
    for message in _list(body.get("messages")):
        content = message.get("content") if isinstance(message, dict) else None
        yield from _anthropic_blocks(content)


def _anthropic_blocks(content: Any) -> Iterator[MediaRef]:
    for block in _list(content):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "tool_result":
            yield from _anthropic_blocks(block.get("content"))
        elif kind == "image":
            source = block.get("source")
            source = source if isinstance(source, dict) else {}
            if source.get("type") == "base64":
                data, media_type = source.get("data"), source.get("media_type")
                if not isinstance(data, str) or not isinstance(media_type, str):
                    raise BadRequest("messages: a base64 image source needs string data and "
                                     "media_type", param="messages")
                yield MediaRef("messages", payload=data, declared=media_type)
            elif source.get("type") == "url":
                yield from_url(source.get("url"), "messages")
            else:
                raise BadRequest("messages: an image needs a base64 or url source",
                                 param="messages")


def _responses(body: dict[str, Any]) -> Iterator[MediaRef]:
    for item in _list(body.get("input")):
        if not isinstance(item, dict):
            continue
        for part in (*_list(item.get("content")), *_list(item.get("output"))):
            if isinstance(part, dict) and part.get("type") == "input_image":
                url = part.get("image_url")
                if url is not None:
                    yield from_url(url, "input")


def _generate(body: dict[str, Any]) -> Iterator[MediaRef]:
    for field in ("image_data", "video_data", "audio_data"):
        yield from _generate_leaves(body.get(field), field, image=field == "image_data")


def _generate_leaves(value: Any, param: str, *, image: bool) -> Iterator[MediaRef]:
    """Strings (nested lists for a batch): a data URL, an image's raw base64 (never
    holds ``:``), or a URL or path (audio and video: anything but a data URL); an
    object is refused, as nothing in it can be checked here."""
    if value is None:
        return
    if isinstance(value, list):
        for item in value:
            yield from _generate_leaves(item, param, image=image)
    elif isinstance(value, str):
        if value.startswith("data:") or ":" in value or not image:
            yield from_url(value, param, image=image)
        else:
            yield MediaRef(param, payload=value, image=image)
    else:
        raise BadRequest(f"{param} entries must be data: URLs or base64 strings", param=param)


_LOCATORS = {Endpoint.CHAT: _chat, Endpoint.MESSAGES: _anthropic,
             Endpoint.RESPONSES: _responses, Endpoint.GENERATE: _generate}


def located(endpoint: Endpoint, body: dict[str, Any]) -> list[MediaRef]:
    """Every medium of ``body``, in the order the prompt holds them."""
    locate = _LOCATORS.get(endpoint)
    return list(locate(body)) if locate is not None else []
