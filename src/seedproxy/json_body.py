"""A request body read as a JSON object: the rule the proxy and its engine share.

``json_object`` returns the parsed body only when it is a JSON object; anything else
(invalid JSON, an array, a scalar) is a ``BadRequest`` (400) saying which, raised
before any other work on the body. Imports only ``errors``, so every layer may use it.
"""

from __future__ import annotations

from typing import Any

import orjson

from .errors import BadRequest

__all__ = ["json_object"]


def json_object(raw: bytes) -> dict[str, Any]:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    return body
