"""Server-sent event frames: the bytes seedproxy and its engine write to a stream.

Every frame is one event ending in a blank line (``\\n\\n``); its data is one line of
compact JSON (``orjson``), so no payload can break a frame. ``data_frame`` is an OpenAI
chunk (chat, completions, ``/generate``), ``typed_frame`` an event named by its
payload's ``type`` (Anthropic Messages, OpenAI Responses), ``DONE`` the OpenAI
terminator. Imports no other seedproxy module, so every layer may use it.
"""

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
