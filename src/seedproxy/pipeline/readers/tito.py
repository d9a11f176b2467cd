"""Chat (and Responses, Messages) in token-in-token-out mode.

The prompt is rendered (``prepare``) before the slot is taken, so a message the
template cannot render is a 400 that uses no index. Each choice is one ``/generate``
(or token-prompt completions) request with its contract seed. The sampled ids are
decoded and parsed token by token on every path, so a streamed answer and a whole one
carry the same message. Chunks are chat chunks; the presenter shows them in the
client's protocol. A chat client's record is the whole chat answer, streamed or not.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...dialects import Captured, UpstreamRequest
from ...errors import BadRequest
from ...fleet.upstream import UpstreamReply
from ...media import CheckedImage
from ...sessions import ChoiceRecord
from ...sessions.codec import Signed
from ...sessions.cursor import SessionView
from ...sse_frames import event_json, split_events
from ...tito import AssistantStream, Prompt, TitoMode, tito_record
from ...tito.dialect import Reader as SampleReader
from ...tito.dialect import Sample
from ...tito.lineage import FullRender, reply_key
from ...tito.sampling import Sampling
from ...tito.vision import image_records
from ...wire.answer_shape import check_error
from . import Reader

if TYPE_CHECKING:
    from ..call import UpstreamCall
    from ..context import RequestContext

__all__ = ["TitoReader", "TitoTurn", "prepare"]


@dataclass(slots=True)
class TitoTurn:
    """One turn's request, its rendered prompt and its sampling fields (read once)."""

    chat: dict[str, Any]
    prompt: Prompt
    sampling: Sampling
    images: Sequence[CheckedImage] = ()  # in order, one placeholder each
    image_records: list[dict[str, Any]] | None = None  # what the record keeps of them


OFFLOAD_CHARS = 16_384
"""A full render of at least this much message text runs on a worker thread."""


async def prepare(mode: TitoMode, chat: dict[str, Any], view: SessionView | None, *,
                  offload_chars: int = OFFLOAD_CHARS, signed: Signed | None = None,
                  images: Sequence[CheckedImage] = ()) -> TitoTurn:
    """Render the prompt from this process's ``view`` of the session (None: no
    history), which seating checks is current; a turn extending one renders only what
    it adds, a large full render (a brought history, a fork) runs on a worker thread.
    ``signed``: ``chat``'s messages as signed when read (reused); ``images``: ``chat``'s,
    checked, in order (each one placeholder of the prompt)."""
    if images and not mode.dialect.takes_images:
        raise BadRequest("this upstream's token prompts carry no images (token-in-token-out "
                         "takes images with --backend sglang)", param="messages")
    sampling = mode.sampling(chat)  # checked now: a bad field is a 400 before the slot
    if view is None:
        plan = mode.plan(chat, [])
    else:
        plan = mode.plan(chat, view.turns(), known=view.known_keys(chat, signed))
    if isinstance(plan, FullRender):  # a whole history: a large one off the event loop
        plan = await asyncio.to_thread(plan.run) if plan.size >= offload_chars else plan.run()
    if len(plan.image_positions) != len(images):
        raise BadRequest(f"the prompt holds {len(plan.image_positions)} image placeholders "
                         f"for {len(images)} images", param="messages")
    records = None
    if images:
        assert mode.renderer.vision is not None  # images of a text model are refused above
        records = image_records(mode.renderer.vision, images, plan.image_positions)
    return TitoTurn(chat, plan, sampling, images, records)


@dataclass(slots=True)
class _Choice:
    index: int
    assistant: AssistantStream
    reader: SampleReader
    call_ids: list[str]

    def sample(self) -> Sample:
        return self.reader.result()

    def finish_reason(self) -> str:
        if self.assistant.reply.tool_calls:
            return "tool_calls"
        finish = self.sample().finish
        return finish if finish in ("length", "abort") else "stop"

    def matched_stop(self) -> int | str | None:
        """The stop string or token id that ended a plain stop (SGLang's
        ``matched_stop``); none for a length, an abort or tool calls."""
        return self.sample().matched if self.finish_reason() == "stop" else None

    def message(self, cid: str) -> dict[str, Any]:
        reply = self.assistant.reply
        if not self.call_ids:
            base = f"{cid}:{self.index}"
            self.call_ids = [self.assistant.call_id(base, k)
                             for k in range(len(reply.tool_calls))]
        return reply.message(self.call_ids)


class TitoReader(Reader):
    def __init__(self, ctx: RequestContext, mode: TitoMode, turn: TitoTurn, *,
                 chat_client: bool) -> None:
        """``chat_client``: the client spoke chat (its usage chunk only when asked, its
        record the whole chat answer); else every chunk feeds a translating presenter."""
        self.mode = mode
        self.turn = turn
        self.chat_client = chat_client
        self.model = turn.chat.get("model") or mode.model_name
        # derived in a session (replays match); else random, as SGLang's are
        self.cid = "chatcmpl-" + (ctx.basis if ctx.basis is not None else uuid.uuid4().hex[:24])
        self.created = int(time.time())
        self.replies: list[UpstreamReply] = []
        self.choices: list[_Choice] = []
        self._max_event = ctx.services.settings.max_upstream_body_bytes
        self._parser = ctx.services.parser
        self._stream = ctx.client.stream
        # One request per choice; without derived seeds (--no-deterministic) every choice
        # carries the client's own seed, or none.
        n = ctx.client.n
        self._seeds: list[int | None] = list(ctx.seeds) if len(ctx.seeds) == n else (
            [ctx.seeds[0] if ctx.seeds else None] * n)
        options = turn.chat.get("stream_options")
        self._options = options if chat_client and isinstance(options, dict) else {}

    def requests(self) -> list[UpstreamRequest]:
        mode, turn = self.mode, self.turn
        images = [image.data_url for image in turn.images]
        return [mode.dialect.request(turn.prompt.ids, turn.sampling, seed, self._stream,
                                     self.model, images) for seed in self._seeds]

    def opened(self, replies: list[UpstreamReply]) -> None:
        mode, turn = self.mode, self.turn
        self.replies = replies
        self.choices = [_Choice(j, mode.assistant(turn.prompt, turn.chat, turn.sampling),
                                mode.dialect.reader(), []) for j in range(len(replies))]

    async def whole(self) -> tuple[Any, Captured]:
        for choice, reply in zip(self.choices, self.replies, strict=True):
            for token_id in choice.reader.feed(await self._parser.reply_answer(reply)):
                choice.assistant.feed(token_id)
            choice.assistant.finish()
        return self._answer(), self.captured()

    async def chunks(self, call: UpstreamCall) -> AsyncIterator[dict[str, Any] | bytes]:
        """Choices one after another (their upstream requests run concurrently)."""
        for choice, reply in zip(self.choices, self.replies, strict=True):
            async for chunk in self._choice_chunks(call, choice, reply):
                yield chunk
        if self._options.get("include_usage") is True or not self.chat_client:
            yield {"id": self.cid, "object": "chat.completion.chunk", "created": self.created,
                   "model": self.model, "choices": [], "usage": self._usage()}

    async def _choice_chunks(self, call: UpstreamCall, choice: _Choice, reply: UpstreamReply
                             ) -> AsyncIterator[dict[str, Any]]:
        yield self._chunk(choice.index, {"role": "assistant", "content": ""})
        chunks = call.timed(aiter(reply.response.stream))
        async for event in split_events(chunks, self._max_event):
            payload = event_json(event)
            if payload is None:
                continue
            check_error(payload)
            for token_id in choice.reader.feed(payload):
                for delta in choice.assistant.feed(token_id):
                    yield self._running(choice, {delta.kind: delta.text})
        for delta in choice.assistant.finish():
            yield self._running(choice, {delta.kind: delta.text})
        message = choice.message(self.cid)
        if message.get("tool_calls"):
            calls = [{"index": k, **call} for k, call in enumerate(message["tool_calls"])]
            yield self._running(choice, {"tool_calls": calls})
        yield self._chunk(choice.index, {}, choice.finish_reason(), choice.matched_stop())

    def captured(self) -> Captured:
        records = []
        for c in self.choices:
            sample = c.sample()
            record = ChoiceRecord.of(sample.token_ids, sample.logprobs, c.finish_reason())
            record.take_versions(sample.versions)
            records.append(record)
        prompt = self.turn.prompt
        replies = [(reply_key(prompt, c.message(self.cid)), c.assistant.reply.reasoning)
                   for c in self.choices]
        return Captured(self.turn.prompt.ids.ids, records,
                        lineage=tito_record(self.turn.prompt, replies, self.turn.image_records))

    def recorded(self, shown: Any) -> Any:
        return self._answer() if self.chat_client else shown

    def _answer(self) -> dict[str, Any]:
        wants_logprobs = self.turn.chat.get("logprobs") is True
        return {
            "id": self.cid, "object": "chat.completion", "created": self.created,
            "model": self.model,
            "choices": [{
                "index": c.index, "message": c.message(self.cid),
                "logprobs": self._logprobs(c) if wants_logprobs else None,
                "finish_reason": c.finish_reason(),
                "matched_stop": c.matched_stop(),
            } for c in self.choices],
            "usage": self._usage(),
        }

    def _usage(self, choices: list[_Choice] | None = None) -> dict[str, int]:
        prompt = len(self.turn.prompt.ids)
        completion = sum(len(c.sample().token_ids) for c in choices or self.choices)
        return {"prompt_tokens": prompt, "completion_tokens": completion,
                "total_tokens": prompt + completion}

    def _logprobs(self, choice: _Choice) -> dict[str, Any]:
        mode, sample = self.mode, choice.sample()
        content = []
        for position, (token_id, logprob) in enumerate(
                zip(sample.token_ids, sample.logprobs, strict=False)):
            if token_id in mode.hidden:
                continue
            text = mode.token_text(token_id)
            tops = sample.top_logprobs[position] if position < len(sample.top_logprobs) else []
            content.append({
                "token": text, "logprob": logprob, "bytes": list(text.encode()),
                "top_logprobs": [{"token": (t := mode.token_text(i)), "logprob": lp,
                                  "bytes": list(t.encode())} for i, lp in tops],
            })
        return {"content": content, "refusal": None}

    def _chunk(self, index: int, delta: dict[str, Any], finish: str | None = None,
               matched: int | str | None = None) -> dict[str, Any]:
        """One choice's chunk as SGLang's chat stream writes it: the delta always
        carries ``reasoning_content`` (null when it adds none), the choice
        ``matched_stop``."""
        return {"id": self.cid, "object": "chat.completion.chunk", "created": self.created,
                "model": self.model, "choices": [{
                    "index": index, "delta": {"reasoning_content": None, **delta},
                    "logprobs": None, "finish_reason": finish, "matched_stop": matched}]}

    def _running(self, choice: _Choice, delta: dict[str, Any]) -> dict[str, Any]:
        """A delta chunk; with ``stream_options.continuous_usage_stats`` it carries the
        choice's usage so far, as SGLang's content and tool-call chunks do."""
        chunk = self._chunk(choice.index, delta)
        if self._options.get("continuous_usage_stats") is True:
            chunk["usage"] = self._usage([choice])
        return chunk

