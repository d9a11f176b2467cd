"""The upstream side of an exchange: one ``Reader`` per way of asking the upstream.

- ``PassthroughReader``: one request in the client's (or its bridge's) dialect; outside
  a session its events pass as sent (the raw fast path), checked only for errors.
- ``FanoutReader``: ``n > 1`` as n one-choice requests, merged.
- ``TitoReader``: token-in-token-out, the prompt rendered here, each choice a
  ``/generate`` (or token-prompt completions) request.

A reader sends (``open``), then gives the whole answer (``whole``) or its canonical
chunks (``chunks``), already checked: an error event, a malformed chunk or a broken
read raises (``failure.py`` names the status). Readers take the exchange and import
nothing back from the HTTP surface.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Protocol

from ...dialects import Captured

if TYPE_CHECKING:
    from ..exchange import Exchange

__all__ = ["Reader"]


class Reader(Protocol):
    media_type: str
    """The whole answer's content type."""

    async def open(self, ex: Exchange) -> None:
        """Send the upstream request(s); raises the ``UpstreamError`` of a failure."""

    async def whole(self, ex: Exchange) -> tuple[Any, Captured]:
        """The checked answer (bytes as sent when nothing is captured), and its tokens."""

    def chunks(self, ex: Exchange) -> AsyncIterator[dict[str, Any] | bytes]:
        """The stream's chunks as the client is shown them (no terminator)."""

    def captured(self) -> Captured:
        """The tokens a stream carried so far."""

    def recorded(self, shown: Any) -> Any:
        """What a stream's record holds, given what the client was shown."""
