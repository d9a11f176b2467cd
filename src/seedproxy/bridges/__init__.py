"""Protocol bridges: the Responses and Anthropic Messages APIs to and from chat
completions, for upstreams that serve only chat. Pure translation, no I/O.

``as_chat`` is the one rule for which requests go upstream as chat, for live traffic
(``pipeline.admission``) and replay verification (``proxy.replay``) alike: Messages
always; Responses in token-in-token-out mode (the proxy renders chat) or where the
backend cannot seed its own ``/v1/responses``.
"""

from __future__ import annotations

from typing import Any

from ..wire.types import Endpoint
from . import anthropic as anthropic_bridge
from . import responses as responses_bridge

__all__ = ["as_chat"]


def as_chat(endpoint: Endpoint, body: dict[str, Any], *, tito: bool,
            seeds_responses: bool) -> dict[str, Any] | None:
    """The chat request sent upstream for ``body`` on ``endpoint``; None when ``body``
    goes as it came."""
    if endpoint is Endpoint.MESSAGES:
        return anthropic_bridge.to_chat(body)
    if endpoint is Endpoint.RESPONSES and (tito or not seeds_responses):
        return responses_bridge.to_chat(body)
    return None
