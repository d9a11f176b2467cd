"""Chat and Responses requests in token-in-token-out mode.

The prompt is built from the session's recorded turns (``backends.tito.lineage``)
before the slot is taken, so a message the template cannot render is a 400 that
uses no index. Each choice is one ``/generate`` (or token-prompt completions)
request with its contract seed. The sampled ids are decoded and parsed token by
token on every path, so a streamed answer and a whole one carry the same message;
the interaction records the prompt ids, the completion ids as sampled, their
logprobs and the lineage (``tito``).
"""

from __future__ import annotations

import hashlib
import logging
import time
from array import array
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx
import orjson
from starlette.responses import Response

from ..backends import Captured
from ..backends.answer_shape import MalformedAnswer
from ..backends.pool import UpstreamReply
from ..backends.tito import AssistantStream, Delta, Prompt, TitoMode, tito_record, tool_call_id
from ..backends.tito.dialect import Reader, Sample
from ..backends.tito.matcher import message_key
from ..errors import SeedProxyError, UpstreamError
from ..sessions import ChoiceRecord, NewSession, SessionRecord
from .fanout import send_choices
from .presentation import Presentation
from .relay import RelayResponse
from .sse import event_json, split_events
from .stream import StreamRecord

if TYPE_CHECKING:
    from .forward import Forwarder, Plan

__all__ = ["TitoTurn", "exchange_tito", "prepare_tito"]

log = logging.getLogger("seedproxy.request")

@dataclass(slots=True)
class TitoTurn:
    chat: dict[str, Any]
    prompt: Prompt


async def prepare_tito(fwd: Forwarder, chat: dict[str, Any],
                       session: SessionRecord | NewSession | None) -> TitoTurn:
    """Render the prompt (4xx here uses no index)."""
    assert fwd.tito is not None
    fwd.tito.sampling(chat)  # checked now: a bad field is a 400 before the slot
    history = (  # a new session has no history yet
        await fwd.sessions.store.interactions(session.session_id)
        if isinstance(session, SessionRecord) else []
    )
    return TitoTurn(chat, fwd.tito.prompt(chat, history))


@dataclass(slots=True)
class _Choice:
    index: int
    assistant: AssistantStream
    reader: Reader
    call_ids: list[str]

    def sample(self) -> Sample:
        return self.reader.result()


def _completion_id(plan: Plan, prompt: Prompt) -> str:
    digest = hashlib.blake2b(digest_size=12)
    digest.update(array("i", prompt.ids).tobytes())
    digest.update(repr(plan.seeds).encode())
    return "chatcmpl-" + digest.hexdigest()


def _finish_reason(choice: _Choice) -> str:
    if choice.assistant.reply.tool_calls:
        return "tool_calls"
    finish = choice.sample().finish
    return finish if finish in ("length", "abort") else "stop"


async def _send(
    fwd: Forwarder, plan: Plan, turn: TitoTurn
) -> list[UpstreamReply] | Response:
    mode = fwd.tito
    assert mode is not None
    sampling = mode.sampling(turn.chat)
    n = plan.client.n
    # One request per choice; without derived seeds (--no-deterministic) every choice
    # carries the client's own seed, or none.
    seeds: list[int | None] = list(plan.seeds) if len(plan.seeds) == n else (
        [plan.seeds[0] if plan.seeds else None] * n)
    model = turn.chat.get("model") or mode.model_name
    requests = [mode.dialect.request(turn.prompt.ids, sampling, seed, plan.client.stream, model)
                for seed in seeds]
    return await send_choices(fwd, plan, requests)


async def exchange_tito(fwd: Forwarder, plan: Plan, turn: TitoTurn) -> Response:
    mode = fwd.tito
    assert mode is not None
    replies = await _send(fwd, plan, turn)
    if isinstance(replies, Response):
        return replies
    cid = _completion_id(plan, turn.prompt)
    choices = [_Choice(j, mode.assistant(turn.prompt, turn.chat), mode.dialect.reader(), [])
               for j in range(len(replies))]
    headers = plan.headers()
    if plan.client.stream:
        headers["x-seedproxy-overhead-ms"] = f"{plan.overhead_ms():.3f}"
        headers["cache-control"] = "no-cache"
        # The one stream mechanism: recorded before the end, or (a client that left)
        # as abandoned with what was generated.
        record = StreamRecord(fwd, plan, lambda: _snapshot(fwd, plan, turn, choices, cid))
        return RelayResponse(_stream(fwd, plan, turn, replies, choices, cid, record), record,
                             status_code=200, headers=headers, media_type="text/event-stream")
    for choice, reply in zip(choices, replies, strict=True):
        try:
            answer = orjson.loads(reply.response.content)
        except orjson.JSONDecodeError:
            invalid = UpstreamError(f"upstream {reply.upstream} returned invalid JSON")
            raise await fwd.reject_answer(plan, invalid) from None
        try:
            new = choice.reader.feed(answer)
        except MalformedAnswer as exc:
            raise await fwd.reject_answer(plan, exc) from None
        for token_id in new:
            choice.assistant.feed(token_id)
        choice.assistant.finish()
    answer = _chat_answer(fwd, plan, turn, choices, cid)
    shown = plan.present.whole(answer) if plan.present is not None else answer
    await _record(fwd, plan, turn, 200, shown, choices, cid)
    headers["x-seedproxy-overhead-ms"] = f"{plan.overhead_ms():.3f}"
    fwd.observe(plan, 200)
    return Response(orjson.dumps(shown), headers=headers, media_type="application/json")


def _usage(turn: TitoTurn, choices: list[_Choice]) -> dict[str, int]:
    prompt = len(turn.prompt.ids)
    completion = sum(len(c.sample().token_ids) for c in choices)
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}


def _logprobs(mode: TitoMode, choice: _Choice) -> dict[str, Any]:
    sample = choice.sample()
    content = []
    for position, (token_id, logprob) in enumerate(zip(sample.token_ids, sample.logprobs,
                                                       strict=False)):
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


def _message(choice: _Choice, cid: str) -> dict[str, Any]:
    reply = choice.assistant.reply
    if not choice.call_ids:
        base = f"{cid}:{choice.index}"
        choice.call_ids = [tool_call_id(base, k) for k in range(len(reply.tool_calls))]
    return reply.message(choice.call_ids)


def _chat_answer(fwd: Forwarder, plan: Plan, turn: TitoTurn, choices: list[_Choice],
                 cid: str) -> dict[str, Any]:
    mode = fwd.tito
    assert mode is not None
    wants_logprobs = turn.chat.get("logprobs") is True
    return {
        "id": cid, "object": "chat.completion", "created": int(time.time()),
        "model": turn.chat.get("model") or mode.model_name,
        "choices": [{
            "index": c.index, "message": _message(c, cid),
            "logprobs": _logprobs(mode, c) if wants_logprobs else None,
            "finish_reason": _finish_reason(c),
        } for c in choices],
        "usage": _usage(turn, choices),
    }


def _captured(turn: TitoTurn, choices: list[_Choice], cid: str) -> Captured:
    records = []
    for c in choices:
        sample = c.sample()
        record = ChoiceRecord.of(sample.token_ids, sample.logprobs, _finish_reason(c))
        record.take_versions(sample.versions)
        records.append(record)
    replies = [(message_key(_message(c, cid)), c.assistant.reply.reasoning) for c in choices]
    return Captured(list(turn.prompt.ids), records, lineage=tito_record(turn.prompt, replies))


async def _record(fwd: Forwarder, plan: Plan, turn: TitoTurn, status: int, shown: Any,
                  choices: list[_Choice], cid: str) -> None:
    await fwd.record(plan, status, shown, _captured(turn, choices, cid))


def _snapshot(fwd: Forwarder, plan: Plan, turn: TitoTurn, choices: list[_Choice],
              cid: str) -> tuple[Any, Captured]:
    """What a stream has produced so far, as recorded (a whole chat answer)."""
    return _chat_answer(fwd, plan, turn, choices, cid), _captured(turn, choices, cid)


def _chunk(cid: str, model: Any, created: int, index: int, delta: dict[str, Any],
           finish: str | None = None) -> dict[str, Any]:
    return {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{"index": index, "delta": delta, "logprobs": None,
                         "finish_reason": finish}]}


async def _choice_chunks(fwd: Forwarder, plan: Plan, turn: TitoTurn, choice: _Choice,
                         reply: UpstreamReply, cid: str, created: int
                         ) -> AsyncIterator[dict[str, Any]]:
    model = turn.chat.get("model") or (fwd.tito.model_name if fwd.tito else None)
    yield _chunk(cid, model, created, choice.index, {"role": "assistant", "content": ""})
    chunks = fwd.timed(plan, aiter(reply.response.stream))  # type: ignore[arg-type]
    async for event in split_events(chunks, fwd.settings.max_upstream_body_bytes):
        payload = event_json(event)
        if payload is None:
            continue
        new = choice.reader.feed(payload)
        for token_id in new:
            for delta in choice.assistant.feed(token_id):
                yield _delta_chunk(cid, model, created, choice.index, delta)
    for delta in choice.assistant.finish():
        yield _delta_chunk(cid, model, created, choice.index, delta)
    message = _message(choice, cid)
    if message.get("tool_calls"):
        calls = [{"index": k, **call} for k, call in enumerate(message["tool_calls"])]
        yield _chunk(cid, model, created, choice.index, {"tool_calls": calls})
    yield _chunk(cid, model, created, choice.index, {}, _finish_reason(choice))


def _delta_chunk(cid: str, model: Any, created: int, index: int, delta: Delta
                 ) -> dict[str, Any]:
    return _chunk(cid, model, created, index, {delta.kind: delta.text})


async def _stream(fwd: Forwarder, plan: Plan, turn: TitoTurn, replies: list[UpstreamReply],
                  choices: list[_Choice], cid: str, record: StreamRecord
                  ) -> AsyncIterator[bytes]:
    """Choices one after another (their upstream requests run concurrently); recorded
    before the end through ``record`` (in the client's protocol's shape when it is not
    chat: ``plan.present``)."""
    created = int(time.time())
    present = plan.present
    writer = present.events() if present is not None else None
    options = turn.chat.get("stream_options")
    usage_wanted = isinstance(options, dict) and options.get("include_usage") is True
    if writer is not None:
        record.snapshot = lambda: (writer.result(), _captured(turn, choices, cid))
    try:
        for choice, reply in zip(choices, replies, strict=True):
            async for chunk in _choice_chunks(fwd, plan, turn, choice, reply, cid, created):
                if present is None or writer is None:
                    yield b"data: " + orjson.dumps(chunk) + b"\n\n"
                else:
                    for out in writer.feed(chunk):
                        yield present.encode(out)
        usage = _usage(turn, choices)
        model = turn.chat.get("model") or (fwd.tito.model_name if fwd.tito else None)
        final: dict[str, Any] = {"id": cid, "object": "chat.completion.chunk", "created": created,
                 "model": model, "choices": [], "usage": usage}
        if present is not None and writer is not None:
            for out in writer.feed(final):
                yield present.encode(out)
            closing = writer.finish()
            unrecorded = await record.seal()
            if unrecorded is not None:
                yield present.error(unrecorded)
                return
            for out in closing:
                yield present.encode(out)
            return
        unrecorded = await record.seal()
        if unrecorded is not None:
            yield b"data: " + orjson.dumps(unrecorded.body()) + b"\n\n"
            return
        if usage_wanted:
            yield b"data: " + orjson.dumps(final) + b"\n\n"
        yield b"data: [DONE]\n\n"
    except httpx.HTTPError as exc:
        record.status = 502
        log.warning("upstream broke off a stream: %s", type(exc).__name__)
        yield _error_event(present, UpstreamError("an upstream broke off the stream"))
    except UpstreamError as exc:  # MalformedAnswer included
        record.status = exc.status_code
        yield _error_event(present, exc)
    except Exception:
        record.status = 500  # seedproxy's own bug: recorded as such, and raised
        raise


def _error_event(present: Presentation | None, exc: SeedProxyError) -> bytes:
    if present is not None:
        return present.error(exc)
    return b"data: " + orjson.dumps(exc.body()) + b"\n\n"
