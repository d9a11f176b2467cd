"""Reading and checking a client's body: only the fields the proxy itself relies on
(the rest is the upstream's to judge: no schema on the hot path).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect, Request

from ..dialects import Endpoint
from ..errors import BadRequest, BodyTimeout, PayloadTooLarge
from ..json_body import json_object
from ..nesting import MAX_DEPTH, too_deep
from ..sessions.codec import Sent, Signed, sign

__all__ = ["MAX_CHOICES", "ClientRequest", "client_request", "decode_body", "decode_signed",
           "documented", "read_body", "read_model", "request_digest"]

M = TypeVar("M", bound=BaseModel)

MAX_CHOICES = 128
"""The largest ``n``: each choice is its own upstream request and seed."""


@dataclass(slots=True)
class ClientRequest:
    endpoint: Endpoint
    raw: bytes
    body: dict[str, Any]
    stream: bool
    n: int
    seed: int | None
    signed: Signed | None = None
    """The body's messages signed against the session's last turn (``decode_signed``),
    for its record to reuse; None outside a session, or for an offloaded body."""


async def read_body(request: Request, limit: int) -> bytes:
    """Read the body, refusing more than ``limit`` bytes with 413. A client that
    leaves (or is cut off by ``protocol.py``'s body deadline) mid-body is a 408,
    answered to no one: nothing is forwarded."""
    declared = request.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"request body over {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge(f"request body over {limit} bytes")
            chunks.append(chunk)
    except ClientDisconnect:
        raise BodyTimeout("the connection closed before the request body was complete") from None
    return b"".join(chunks)


async def read_model(request: Request, model: type[M], limit: int) -> M:
    """Read (as ``read_body`` does) and validate an admin route's body. Call it after
    the auth check: nothing is read before."""
    raw = await read_body(request, limit)
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from None
    _check_depth(raw, data)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]
        raise RequestValidationError(errors) from None


def decode_body(endpoint: Endpoint, raw: bytes) -> dict[str, Any]:
    """``raw`` parsed, refused (``BadRequest``) unless it is a JSON object no deeper
    than ``MAX_DEPTH`` that holds ``endpoint``'s prompt. The whole of the work on a
    body's size: ``offload.py`` runs it in a worker process for a large body."""
    body = json_object(raw)
    _check_depth(raw, body)
    _check_prompt(endpoint, body)
    return body


def decode_signed(endpoint: Endpoint, raw: bytes, last: tuple[str, Sent] | None
                  ) -> tuple[dict[str, Any], Signed | None]:
    """``decode_body``, with the body's messages signed against ``last`` (the session's
    last recorded turn: its interaction id and ``Sent``; None before its first). Messages
    that repeat that turn's byte for byte sit where an accepted body held them, so only
    the rest of the body is walked for depth: the walk costs what the request adds."""
    body = json_object(raw)
    signed = sign(body, *(last if last is not None else (None, None)))
    known = (last[1].field, last[1].count) if (
        last is not None and signed is not None and signed.repeated) else None
    _check_depth(raw, body, known)
    _check_prompt(endpoint, body)
    return body, signed


def client_request(endpoint: Endpoint, raw: bytes, body: dict[str, Any],
                   signed: Signed | None = None) -> ClientRequest:
    """The request ``decode_body`` read, its top-level fields checked."""
    params = body.get("sampling_params") if endpoint is Endpoint.GENERATE else body
    if endpoint is Endpoint.GENERATE and params is not None and not isinstance(params, dict):
        raise BadRequest("sampling_params must be an object", param="sampling_params")
    params = params or {}
    seed_key = "sampling_seed" if endpoint is Endpoint.GENERATE else "seed"
    seed = _optional_int(params, seed_key)
    n = _optional_int(params, "n")
    if n is not None and not 1 <= n <= MAX_CHOICES:
        raise BadRequest(f"n must be between 1 and {MAX_CHOICES}", param="n")
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise BadRequest("stream must be a boolean", param="stream")
    return ClientRequest(endpoint, raw, body, stream, n or 1, seed, signed)


def request_digest(endpoint: Endpoint, raw: bytes) -> bytes:
    """Identify a body byte for byte, for matching SDK retries (SHA-256, cut to 16 bytes:
    faster than blake2b on CPUs with SHA extensions)."""
    digest = hashlib.sha256(endpoint.value.encode() + b"\0")
    digest.update(raw)
    return digest.digest()[:16]


def _check_prompt(endpoint: Endpoint, body: dict[str, Any]) -> None:
    if endpoint is Endpoint.CHAT:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("messages must be a non-empty list", param="messages")
        if not all(isinstance(m, dict) for m in messages):
            raise BadRequest("each message must be an object", param="messages")
    elif endpoint is Endpoint.COMPLETIONS:
        if not isinstance(body.get("prompt"), str | list):
            raise BadRequest("prompt must be a string or a list", param="prompt")
    elif endpoint is Endpoint.RESPONSES:
        if not isinstance(body.get("input"), str | list):
            raise BadRequest("input must be a string or a list of items", param="input")
    elif endpoint is Endpoint.GENERATE:
        if body.get("text") is None and body.get("input_ids") is None:
            raise BadRequest("/generate needs text or input_ids", param="text")
        ids = body.get("input_ids")
        if ids is not None and not isinstance(ids, list):
            raise BadRequest("input_ids must be a list", param="input_ids")


def _check_depth(raw: bytes, body: dict[str, Any], known: tuple[str, int] | None = None) -> None:
    """Refuse a body nested more than ``MAX_DEPTH`` (64) levels (400, before any work):
    deeper JSON could not be stored and exported. A body with fewer brackets than that
    cannot be so deep, so most are never walked. ``known``: a message field and how
    many of its first items an accepted body held at the same place (not walked)."""
    if known is not None:
        field, count = known
        deep = too_deep({**body, field: body[field][count:]})
    else:
        deep = raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and too_deep(body)
    if deep:
        raise BadRequest(f"request body is nested more than {MAX_DEPTH} levels deep")


_INT64 = range(-(2**63), 2**63)
"""What an int field may hold: OpenAI's ``seed`` is an int64, and so are SGLang's."""


def _optional_int(body: dict[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    # orjson reads an integer too large for 64 bits as a float: a range error, not a type one.
    too_big_float = isinstance(value, float) and value.is_integer() and abs(value) >= 2**63
    if too_big_float or (isinstance(value, int) and value not in _INT64):
        raise BadRequest(f"{key} {value} is out of range: it must fit in 64 bits "
                         f"(-2**63 to 2**63-1)", param=key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"{key} must be an integer", param=key)
    return value


def documented(model: type[BaseModel]) -> dict[str, Any]:
    """The OpenAPI request body of a route that reads ``model`` itself (after auth).
    Nested models are inlined: pydantic's ``#/$defs/...`` references mean nothing at
    an OpenAPI document's root."""
    schema = model.model_json_schema()
    definitions = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return inline(definitions[ref.removeprefix("#/$defs/")])
            return {key: inline(value) for key, value in node.items()}
        if isinstance(node, list):
            return [inline(value) for value in node]
        return node

    body = {"content": {"application/json": {"schema": inline(schema)}}}
    return {"requestBody": {"required": True, **body}}
