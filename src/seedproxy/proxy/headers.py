"""Request headers the proxy reads, and the ``x-seedproxy-*`` headers it writes."""

from __future__ import annotations

from starlette.datastructures import Headers

from ..errors import BadRequest

__all__ = ["bearer_token", "client_key", "pinned_index", "is_sdk_retry", "seedproxy_headers"]

RETRY_HEADER = "x-stainless-retry-count"


def bearer_token(headers: Headers) -> str | None:
    value = headers.get("authorization", "")
    scheme, _, token = value.partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def client_key(headers: Headers) -> str | None:
    """The key a client presents: ``Authorization: Bearer KEY``, else ``x-api-key: KEY``
    (how the anthropic SDKs and Claude Code send it)."""
    return bearer_token(headers) or headers.get("x-api-key", "").strip() or None


def pinned_index(headers: Headers) -> int | None:
    """``X-Request-Index: N``; a value that is not a non-negative int is a 400."""
    value = headers.get("x-request-index")
    if value is None:
        return None
    value = value.strip()
    if not value.isdigit() or len(value) > 15:
        raise BadRequest("X-Request-Index must be a non-negative integer", param="X-Request-Index")
    return int(value)


def is_sdk_retry(headers: Headers) -> bool:
    value = headers.get(RETRY_HEADER, "0").strip()
    return value.isdigit() and int(value) >= 1


def seedproxy_headers(
    session_id: str | None, index: int | None, seeds: list[int], upstream: str | None
) -> dict[str, str]:
    headers: dict[str, str] = {}
    if session_id is not None:
        headers["x-seedproxy-session"] = session_id
    if index is not None:
        headers["x-seedproxy-request-index"] = str(index)
    if seeds:
        headers["x-seedproxy-seed"] = ",".join(str(s) for s in seeds)
    if upstream is not None:
        headers["x-seedproxy-upstream"] = upstream
    return headers
