"""The ids a client is shown, derived from the request's basis (``RequestContext.basis``).

Upstream ids are a request id or a clock (SGLang's chat ``id`` is its ``rid``; tool
calls get a random ``call_`` id). In a session every one is replaced: the answer id
by ``chatcmpl-``/``cmpl-`` + basis, a choice's tool calls by ``call_`` + a hash of
(basis, choice, position), ``/generate``'s ``meta_info.id`` by the basis (unless the
client named its own ``rid``). A replay of the same identity shows the same ids.
"""

from __future__ import annotations

import hashlib
from typing import Any

from ...dialects import Endpoint

__all__ = ["call_id", "stamp"]

_PREFIX = {Endpoint.CHAT: "chatcmpl-", Endpoint.COMPLETIONS: "cmpl-"}


def call_id(basis: str, choice: int, position: int) -> str:
    return "call_" + hashlib.sha256(f"{basis}:{choice}:{position}".encode()).hexdigest()[:24]


def stamp(endpoint: Endpoint, item: Any, basis: str, client_body: dict[str, Any]) -> None:
    """Replace the upstream's ids in ``item`` (a whole answer or one chunk), in place."""
    if endpoint is Endpoint.GENERATE:
        if "rid" in client_body:
            return
        for entry in item if isinstance(item, list) else [item]:
            meta = entry.get("meta_info") if isinstance(entry, dict) else None
            if isinstance(meta, dict) and "id" in meta:
                index = entry.get("index", 0)
                meta["id"] = basis if not index else f"{basis}-{index}"
        return
    prefix = _PREFIX.get(endpoint)
    if prefix is None or not isinstance(item, dict):
        return
    if "id" in item:
        item["id"] = prefix + basis
    for choice in item.get("choices") or []:
        if not isinstance(choice, dict):
            continue
        index = choice.get("index", 0)
        message = choice.get("message") or choice.get("delta")
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        for k, call in enumerate(calls or []):
            if isinstance(call, dict) and call.get("id"):
                position = call.get("index", k)
                call["id"] = call_id(basis, index if type(index) is int else 0,
                                     position if type(position) is int else k)
