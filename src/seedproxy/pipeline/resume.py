"""Abort and resubmit: a ``/generate`` request that a fleet pause aborted mid-generation
is sent again after the fleet continues, as prompt + tokens so far, with the same seed
and the remaining token budget, and the client sees one uninterrupted answer.

Invariants:
- Token-id requests resume (``input_ids``, one choice): SGLang's deterministic sampler
  hashes (seed, absolute position, token), so the continuation is the one an unpaused
  run gives on the same weights.
- Non-streamed chat and completions are sent again whole, with the same seed: the
  answer an unpaused run gives on the same weights, or one wholly from the new weights.
  A stream that already began ends with ``finish_reason`` abort, as the server sent it,
  and is recorded so. Text-prompt ``/generate`` is not resumed either.
- A request resumes only when the abort came from the fleet's control plane: the gate's
  ``abort_epoch`` moved since the attempt was sent. An aborted answer whose epoch did
  not move here asks the board first (one read, on that path only): the board's epoch
  moved before any server aborted. Any other abort reaches the client as sent, and a
  request whose ``Dispatch`` was stopped (its client left, its session was deleted) is
  never resubmitted.
- The stitched answer is SGLang's shape: ``output_ids``, ``text`` and logprobs
  concatenated, ``completion_tokens`` counted once, ``prompt_tokens`` the original, and
  ``weight_versions`` spans offset to absolute output positions, one span list per
  attempt (so a resume point stays visible even when the version did not change).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson

from ..dialects import UpstreamRequest
from ..errors import SeedProxyError, StoreError
from ..fleet.pool import UpstreamPool
from ..fleet.state import PauseGate
from ..fleet.upstream import Dispatch, UpstreamReply
from ..sessions.token_ids import TokenIds
from ..sse_frames import DONE, data_frame, event_json, split_events
from ..transport.body import UpstreamResponse
from .offload import Parser

__all__ = ["ResumingSender"]

log = logging.getLogger("seedproxy.request")

_WHOLE = frozenset({"/v1/chat/completions", "/v1/completions"})


def resumable(request: UpstreamRequest) -> bool:
    """Whether ``request`` is a one-choice ``/generate`` with a token-id prompt."""
    body = request.body
    params = body.get("sampling_params")
    n = params.get("n", 1) if isinstance(params, dict) else 1
    ids = body.get("input_ids")
    if request.path != "/generate" or n != 1:
        return False
    # Token-in-token-out's prompt is packed ids already. ``set(map(type, ...))`` runs in
    # C: a client's 55k-token prompt costs no Python loop.
    return isinstance(ids, TokenIds) or (isinstance(ids, list) and set(map(type, ids)) <= {int})


class _Progress:
    """What the attempts so far produced, and how to shift the next attempt's answer."""

    def __init__(self, request: UpstreamRequest, dispatch: Dispatch | None) -> None:
        self.request = request
        self.dispatch = dispatch
        self.prompt: list[int] | TokenIds = request.body["input_ids"]  # never changed
        params = request.body.get("sampling_params") or {}
        budget = params.get("max_new_tokens")
        self.budget: int | None = budget if type(budget) is int else None
        self.ids: list[int] = []
        self.text = ""
        self.logprobs: list[Any] = []
        self.spans: list[dict[str, Any]] = []
        self.attempts = 1

    def next_request(self) -> UpstreamRequest:
        body = dict(self.request.body)
        if "rid" in body:  # a new attempt is a new request on the server, named after it
            body["rid"] = f"{self.request.body['rid']}.{self.attempts}"
        self.attempts += 1
        prompt = self.prompt
        body["input_ids"] = (prompt.extended(self.ids) if isinstance(prompt, TokenIds)
                             else prompt + self.ids)
        params = dict(body.get("sampling_params") or {})
        if self.budget is not None:
            params["max_new_tokens"] = self.budget - len(self.ids)
        body["sampling_params"] = params
        return UpstreamRequest(self.request.path, body, dict(self.request.headers))

    def shifted(self, item: dict[str, Any]) -> dict[str, Any]:
        """``item`` (one attempt's cumulative answer) as part of the whole answer."""
        if not self.ids:
            return item
        offset = len(self.ids)
        ids, text, meta = item.get("output_ids"), item.get("text"), item.get("meta_info")
        out = {**item, "output_ids": self.ids + (ids if isinstance(ids, list) else []),
               "text": self.text + (text if isinstance(text, str) else "")}
        if isinstance(meta, dict):
            meta = out["meta_info"] = {**meta, "prompt_tokens": len(self.prompt)}
            done, logprobs = meta.get("completion_tokens"), meta.get("output_token_logprobs")
            if type(done) is int:
                meta["completion_tokens"] = offset + done
            if isinstance(logprobs, list):
                meta["output_token_logprobs"] = self.logprobs + logprobs
            spans = meta.get("weight_versions")
            if isinstance(spans, list):
                meta["weight_versions"] = self.spans + [
                    {**s, "start": s["start"] + offset, "end": s["end"] + offset}
                    for s in spans
                    if isinstance(s, dict) and type(s.get("start")) is int
                    and type(s.get("end")) is int
                ]
        return out

    def absorb(self, whole: dict[str, Any]) -> None:
        """Take a shifted, aborted answer as the progress so far."""
        ids, text, meta = whole.get("output_ids"), whole.get("text"), whole.get("meta_info")
        if isinstance(ids, list):
            self.ids = list(ids)
        if isinstance(text, str):
            self.text = text
        if isinstance(meta, dict):
            if isinstance(meta.get("output_token_logprobs"), list):
                self.logprobs = list(meta["output_token_logprobs"])
            if isinstance(meta.get("weight_versions"), list):
                self.spans = list(meta["weight_versions"])

    def exhausted(self) -> bool:
        return self.budget is not None and len(self.ids) >= self.budget


def _aborted(item: Any) -> bool:
    if not isinstance(item, dict) or not isinstance(item.get("meta_info"), dict):
        return False
    finish = item["meta_info"].get("finish_reason")
    return isinstance(finish, dict) and finish.get("type") == "abort"


class ResumingSender:
    """``send`` as ``UpstreamPool.send``, resuming what a fleet abort cut short."""

    def __init__(self, pool: UpstreamPool, gate: PauseGate, parser: Parser, *,
                 max_event_bytes: int, rids: bool = False,
                 refresh: Callable[[], Awaitable[None]] | None = None) -> None:
        """``parser`` reads whole answers; ``rids``: name each request (SGLang's
        ``rid``) so that it can be aborted. ``refresh``: apply the fleet board's state
        to ``gate`` now (``FleetControl``)."""
        self.pool = pool
        self.gate = gate
        self.parser = parser
        self.max_event_bytes = max_event_bytes
        self.rids = rids
        self.refresh = refresh

    async def send(
        self, request: UpstreamRequest, *, key: str | None, stream: bool,
        dispatch: Dispatch | None = None,
    ) -> UpstreamReply:
        """``dispatch`` names each attempt as it is sent (see ``Dispatch``)."""
        if self.rids and "rid" not in request.body:
            request.body["rid"] = f"seedproxy-{uuid.uuid4().hex}"
        if not resumable(request):
            if stream or request.path not in _WHOLE:
                return await self.pool.send(request, key=key, stream=stream, dispatch=dispatch)
            return await self._send_whole(request, key, dispatch)
        progress = _Progress(request, dispatch)
        epoch = self.gate.abort_epoch
        reply = await self.pool.send(request, key=key, stream=stream, dispatch=dispatch)
        if reply.response.status_code != 200:
            return reply
        dispatched = reply.dispatch_weight_version
        if stream:
            body = _Stitched(self, progress, key, reply, epoch)
            response = UpstreamResponse(200, reply.response.headers, body)
            stitched = UpstreamReply(reply.upstream, response, reply.waited_s, reply.failovers,
                                     dispatched, reply.rid)
            body.whole = stitched
            return stitched
        waited = 0.0
        while True:
            waited += reply.waited_s
            try:
                answer = await self.parser.answer(reply.response.content)
            except orjson.JSONDecodeError:
                return reply  # the caller reports an answer that is not JSON
            whole = progress.shifted(answer) if isinstance(answer, dict) else answer
            if not await self._resume(whole, epoch, progress):
                if progress.attempts == 1:  # never resumed: the reply as it came, parsed
                    reply.parsed = (answer,)
                    return reply
                response = UpstreamResponse(200, reply.response.headers,
                                            content=orjson.dumps(whole))
                return UpstreamReply(reply.upstream, response, waited, reply.failovers,
                                     dispatched, reply.rid, parsed=(whole,))
            progress.absorb(whole)
            epoch = self.gate.abort_epoch
            reply = await self.pool.send(progress.next_request(), key=key, stream=False,
                                         dispatch=dispatch)
            if reply.response.status_code != 200:
                return reply

    async def _send_whole(self, request: UpstreamRequest, key: str | None,
                          dispatch: Dispatch | None) -> UpstreamReply:
        """Send a non-streamed OpenAI request again while a fleet abort cuts it short."""
        while True:
            epoch = self.gate.abort_epoch
            reply = await self.pool.send(request, key=key, stream=False, dispatch=dispatch)
            if reply.response.status_code != 200 or (
                    dispatch is not None and dispatch.stopped is not None):
                return reply
            try:
                answer = await self.parser.answer(reply.response.content, request.echo,
                                                  echoes=request.echoes)
            except orjson.JSONDecodeError:
                return reply
            reply.parsed = (answer,)
            choices = answer.get("choices") if isinstance(answer, dict) else None
            if not isinstance(choices, list) or not any(
                isinstance(c, dict) and c.get("finish_reason") == "abort" for c in choices
            ) or not await self._fleet_aborted(epoch):
                return reply

    async def _resume(self, whole: Any, epoch: int, progress: _Progress) -> bool:
        stopped = progress.dispatch is not None and progress.dispatch.stopped is not None
        return (_aborted(whole) and not progress.exhausted() and not stopped
                and await self._fleet_aborted(epoch))

    async def _fleet_aborted(self, epoch: int) -> bool:
        """Whether the fleet aborted running requests since ``epoch``, asking the board
        when this replica has not heard of it yet."""
        if self.gate.abort_epoch == epoch and self.refresh is not None:
            try:
                await self.refresh()
            except StoreError as exc:  # the abort stands: the client sees it
                log.warning("could not read the fleet board after an abort: %s", exc.message)
        return self.gate.abort_epoch != epoch


class _Stitched:
    """The SSE stream of every attempt as one: an aborted attempt's last event and its
    ``[DONE]`` are held back, and the next attempt's events are shifted."""

    def __init__(self, sender: ResumingSender, progress: _Progress, key: str | None,
                 reply: UpstreamReply, epoch: int) -> None:
        self._sender = sender
        self._progress = progress
        self._key = key
        self._reply = reply
        self._epoch = epoch
        self.whole: UpstreamReply | None = None
        """The reply this stream is the body of: it names the attempt now running."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            held: dict[str, Any] | None = None
            chunks = aiter(self._reply.response.stream)
            async for event in split_events(chunks, self._sender.max_event_bytes):
                item = event_json(event)
                if isinstance(item, dict):
                    whole = self._progress.shifted(item)
                    if await self._sender._resume(whole, self._epoch, self._progress):
                        held = whole
                        continue
                    yield data_frame(whole)
                elif event.strip() != DONE.strip() or held is None:
                    yield event
            if held is None:
                return
            await self._reply.aclose()
            self._progress.absorb(held)
            self._epoch = self._sender.gate.abort_epoch
            try:
                self._reply = await self._sender.pool.send(
                    self._progress.next_request(), key=self._key, stream=True,
                    dispatch=self._progress.dispatch,
                )
            except SeedProxyError as exc:  # no server took the rest, or it was stopped:
                # the abort stands
                log.warning("could not resume a stream after a fleet abort: %s", exc.message)
                yield data_frame(held)
                yield DONE
                return
            if self.whole is not None:
                self.whole.upstream, self.whole.rid = self._reply.upstream, self._reply.rid
            if self._reply.response.status_code != 200:
                yield data_frame(held)  # the abort stands: the client sees it
                yield DONE
                return

    async def aclose(self) -> None:
        await self._reply.aclose()
