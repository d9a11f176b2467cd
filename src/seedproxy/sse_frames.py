"""Server-sent event frames: the bytes seedproxy and its engine write to a stream. A
frame's data is one line of compact JSON, so no payload can break a frame.
``data_frame`` is an OpenAI chunk, ``typed_frame`` an event named by its payload's
``type`` (Anthropic Messages, OpenAI Responses)."""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["DONE", "data_frame", "typed_frame"]

DONE = b"data: [DONE]\n\n"


def data_frame(payload: Any) -> bytes:
    """``data: JSON``."""
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def typed_frame(payload: dict[str, Any]) -> bytes:
    """``event: TYPE`` then ``data: JSON``, ``TYPE`` being ``payload["type"]``."""
    kind = str(payload["type"]).encode()
    return b"event: " + kind + b"\ndata: " + orjson.dumps(payload) + b"\n\n"
