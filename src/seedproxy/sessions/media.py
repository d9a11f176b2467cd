"""The images a recorded request carries, by the SHA-256 of their bytes: what an export
puts next to a vision sample's ids (each image once per sample, inline).

A request holds an image as a base64 ``data:`` URL (chat ``image_url``, Responses
``input_image``) or an Anthropic base64 source; the proxy accepted only those
(``media``), so nothing else is looked for, and nothing is fetched.
"""

from __future__ import annotations

import binascii
import hashlib
from collections.abc import Iterator
from typing import Any

from ..errors import StoreError
from .codec import conversation
from .interaction import Interaction

__all__ = ["prompt_image_data", "request_images", "sample_images"]


def request_images(request: Any) -> dict[str, tuple[str, str]]:
    """sha256 (hex) -> (media type, base64) for every image in ``request``'s messages."""
    found = conversation(request)
    out: dict[str, tuple[str, str]] = {}
    for media_type, payload in _walk(found[1] if found else []):
        try:
            data = binascii.a2b_base64(payload, strict_mode=True)
        except ValueError:  # not an image this proxy accepted: not one of the prompt's
            continue
        out.setdefault(hashlib.sha256(data).hexdigest(), (media_type, payload))
    return out


def sample_images(records: list[dict[str, Any]], request: Any) -> list[dict[str, Any]]:
    """``records`` (a vision prompt's ``images``), each with its bytes inline as
    ``data`` (base64) from ``request``, the last request of the sample, which holds
    them all. An image it does not hold (a record without its request) has no ``data``."""
    payloads = request_images(request)
    out = []
    for record in records:
        found = payloads.get(record["sha256"])
        out.append({**record, "data": found[1] if found else None})
    return out


def prompt_image_data(interaction: Interaction) -> list[str]:
    """A recorded token-in-token-out prompt's images as its ``/generate`` carried them
    (data URLs, in order), from its own request; [] for a prompt without images."""
    records = (interaction.tito or {}).get("images") or []
    out = []
    for image in sample_images(records, interaction.request):
        if image["data"] is None:
            raise StoreError(f"interaction {interaction.interaction_id!r}: its request does "
                             f"not hold image {image['sha256']}")
        out.append(f"data:{image['media_type']};base64,{image['data']}")
    return out


def _walk(node: Any) -> Iterator[tuple[str, str]]:
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if item.get("type") == "base64" and isinstance(item.get("data"), str):
                yield str(item.get("media_type")), item["data"]
                continue
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, list):
            stack.extend(reversed(item))
        elif isinstance(item, str) and item.startswith("data:"):
            head, sep, payload = item.partition(",")
            if sep and head.endswith(";base64"):
                yield head[5:-7], payload
