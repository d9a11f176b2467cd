"""One upstream request in the client's dialect (or a bridge's chat translation).

In a session each event is parsed, checked (``check_chunk``), captured by the backend
and stamped with the derived ids; outside one, events pass as sent (the raw fast
path), parsed only when one may carry ``error``.

In a session every upstream id (a request id or a clock) is replaced by one derived
from ``RequestContext.basis``, so a replay shows the same ids: the answer id by
``chatcmpl-``/``cmpl-`` + basis, tool calls by ``call_`` + a hash of (basis, choice,
position), ``/generate``'s ``meta_info.id`` by the basis (unless the client named
its own ``rid``).
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from ...dialects import Captured, Endpoint, StreamCapture, UpstreamRequest
from ...fleet.upstream import UpstreamReply
from ...sse_frames import DONE, event_json, split_events
from ...wire.answer_shape import check_answer, check_chunk, check_error
from . import Reader

if TYPE_CHECKING:
    from ..call import UpstreamCall
    from ..context import RequestContext

__all__ = ["PassthroughReader", "stamp"]

_DONE = DONE.strip()


class PassthroughReader(Reader):
    def __init__(self, ctx: RequestContext, endpoint: Endpoint, body: dict[str, Any],
                 seed: int | None, *, raw: bool, stamped: bool = True) -> None:
        """``body``: what is sent (a private copy is made); ``seed``: placed by the
        backend; ``raw``: the answer passes as sent (nothing captured, shown as is);
        ``stamped``: replace the upstream's ids (a fan-out stamps the merged chunks)."""
        self.endpoint = endpoint
        self.body = body
        self.seed = seed
        self.reply: UpstreamReply | None = None
        services = ctx.services
        self._backend = services.backend
        self._max_event = services.settings.max_upstream_body_bytes
        self._basis = ctx.basis if stamped else None
        self._capture = ctx.capture
        self._raw = raw and not ctx.capture
        self._parser = services.parser
        self._echoes = ctx.capture and not ctx.client.stream and self._backend.echoes_prompt
        # the session's last prompt as this process saw it (no store operation): what
        # the answer's echoed prompt ids most likely start with
        view = ctx.services.sessions.cursors.peek(ctx.session) if (
            self._echoes and ctx.session is not None) else None
        self._echo = view.last_prompt() if view is not None else None
        self._tracker: StreamCapture | None = (
            self._backend.stream_capture(endpoint, body) if ctx.capture and ctx.client.stream
            else None)

    def requests(self) -> list[UpstreamRequest]:
        request = self._backend.prepare(self.endpoint, dict(self.body), self.seed,
                                        capture=self._capture)
        request.echo, request.echoes = self._echo, self._echoes
        return [request]

    def opened(self, replies: list[UpstreamReply]) -> None:
        (self.reply,) = replies

    async def whole(self) -> tuple[Any, Captured]:
        reply = self.reply
        assert reply is not None
        if self._raw:
            self.media_type = reply.response.headers.get("content-type", self.media_type)
            return reply.response.content, Captured()
        answer = await self._parser.reply_answer(reply)
        check_answer(self.endpoint, answer)
        captured = Captured()
        if self._capture:
            answer, captured = self._backend.finish(self.endpoint, self.body, answer)
        if self._basis is not None:
            stamp(self.endpoint, answer, self._basis, self.body)
        return answer, captured

    async def chunks(self, call: UpstreamCall | None
                     ) -> AsyncIterator[dict[str, Any] | bytes]:
        """The upstream's events until its ``[DONE]``: parsed, checked, captured and
        stamped in a session; as sent outside one. ``call``: where the wait is timed
        (none: the caller times it)."""
        reply = self.reply
        assert reply is not None
        # The call closes the response.
        chunks = aiter(reply.response.stream)
        async for event in split_events(call.timed(chunks) if call else chunks, self._max_event):
            if self._raw:
                if b'"error"' in event:
                    check_error(event_json(event))
                if event.strip() == _DONE:
                    return
                yield event
                continue
            payload = event_json(event)
            if payload is None:
                if event.strip() == _DONE:
                    return
                continue  # comments and keep-alives
            check_chunk(self.endpoint, payload)
            shown = self._tracker.feed(payload) if self._tracker is not None else payload
            if shown is not None:
                if self._basis is not None:
                    stamp(self.endpoint, shown, self._basis, self.body)
                yield shown

    def captured(self) -> Captured:
        return self._tracker.result() if self._tracker is not None else Captured()


_PREFIX = {Endpoint.CHAT: "chatcmpl-", Endpoint.COMPLETIONS: "cmpl-"}


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
            if isinstance(call, dict) and call.get("id"):  # call_ + a hash of its place
                at = call.get("index", k)
                key = f"{basis}:{index if type(index) is int else 0}:{at if type(at) is int else k}"
                call["id"] = "call_" + hashlib.sha256(key.encode()).hexdigest()[:24]
