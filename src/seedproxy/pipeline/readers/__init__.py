"""The upstream side of a request: one ``Reader`` per way of asking the upstream.

``PassthroughReader`` (the client's or its bridge's dialect), ``FanoutReader`` (``n >
1`` as n one-choice requests), ``TitoReader`` (token-in-token-out), ``RecordReader`` (a
recorded interaction: nothing is sent).

A reader names its upstream requests (``requests``), takes their replies (``opened``),
then gives the whole answer (``whole``) or its canonical chunks (``chunks``), already
checked: an error event, a malformed chunk or a broken read raises. A reader reads the
request's context once, at construction, and writes nothing of any stage's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from ...dialects import Captured, UpstreamRequest
from ...fleet.upstream import UpstreamReply

if TYPE_CHECKING:
    from ..call import UpstreamCall

__all__ = ["Reader"]


class Reader:
    media_type = "application/json"
    """The whole answer's content type."""

    def requests(self) -> list[UpstreamRequest]:
        """The upstream requests to send together (none: answered without an upstream)."""
        return []

    def opened(self, replies: list[UpstreamReply]) -> None:
        """Take the replies to ``requests``, in their order."""

    async def whole(self) -> tuple[Any, Captured]:
        """The checked answer (bytes as sent when nothing is captured), and its tokens."""
        raise NotImplementedError

    def chunks(self, call: UpstreamCall) -> AsyncIterator[dict[str, Any] | bytes]:
        """The stream's chunks as the client is shown them (no terminator); the time
        spent waiting on the upstream is added to ``call``."""
        raise NotImplementedError

    def captured(self) -> Captured:
        """The tokens a stream carried so far."""
        return Captured()

    def recorded(self, shown: Any) -> Any:
        """What a stream's record holds, given what the client was shown."""
        return shown
