"""Request headers the proxy reads (``observer.py`` writes the ``x-seedproxy-*`` ones)."""

from __future__ import annotations

import re

from starlette.datastructures import Headers

from ..errors import BadRequest

__all__ = ["client_key", "compacted_from", "is_sdk_retry", "pinned_index"]

_COMPACTED_FROM = "x-seedproxy-compacted-from"

_MAX_DIGITS = 15

_INTERACTION_ID = re.compile(r"[ic][0-9a-f]{1,16}(\.p?[0-9]{1,15})?")
"""The ids seedproxy gives interactions: ``i{index}``, ``i{index}.p{k}``, ``c{key}.{n}``."""


def _count(value: str) -> int | None:
    """``value`` as a non-negative int of at most 15 ASCII digits, else None.
    (``str.isdigit`` also takes "²" and "١", which ``int`` then refuses or reads.)"""
    value = value.strip()
    if not value or len(value) > _MAX_DIGITS or not value.isascii() or not value.isdigit():
        return None
    return int(value)


def client_key(headers: Headers) -> str | None:
    """The key a client presents: ``Authorization: Bearer KEY``, else ``x-api-key: KEY``
    (how the anthropic SDKs and Claude Code send it)."""
    scheme, _, token = headers.get("authorization", "").partition(" ")
    bearer = token.strip() if scheme.lower() == "bearer" else ""
    return bearer or headers.get("x-api-key", "").strip() or None


def pinned_index(headers: Headers) -> int | None:
    """``X-Request-Index: N``; a value that is not a non-negative int is a 400."""
    value = headers.get("x-request-index")
    if value is None:
        return None
    index = _count(value)
    if index is None:
        raise BadRequest(
            f"X-Request-Index must be a non-negative integer of at most {_MAX_DIGITS} ASCII digits",
            param="X-Request-Index",
        )
    return index


def compacted_from(headers: Headers) -> str | None:
    """``x-seedproxy-compacted-from``: the interaction (``i19``, or its request index
    ``19``) whose history this request's summary replaces; a malformed one is a 400."""
    value = headers.get(_COMPACTED_FROM)
    if value is None:
        return None
    index = _count(value)
    if index is not None:
        return f"i{index}"
    value = value.strip()
    if not _INTERACTION_ID.fullmatch(value):
        raise BadRequest(f"{_COMPACTED_FROM} must be a request index or an interaction id "
                         "(such as i19)", param=_COMPACTED_FROM)
    return value


def is_sdk_retry(headers: Headers) -> bool:
    """Whether ``x-stainless-retry-count`` is >= 1; a malformed count is not a retry
    (the header is an SDK's hint, so it never fails a request)."""
    value = headers.get("x-stainless-retry-count")
    count = _count(value) if value is not None else None
    return count is not None and count >= 1
