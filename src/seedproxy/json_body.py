"""A request body read as a JSON object (anything else a 400): the rule the proxy and
its engine share."""

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
