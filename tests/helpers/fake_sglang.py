"""A test upstream that behaves like an SGLang server in deterministic mode, as
``shared/notes/domain.md`` describes, with switches for injecting failures.

- The seed acts only through ``seed`` (OpenAI routes) or
  ``sampling_params.sampling_seed`` (/generate); no seed means 42.
- ``n`` copies the seed to every choice, so the choices are identical.
- An unknown ``sampling_params`` key is a 400, as is a non-int ``sampling_seed``.
- ``temperature == 0`` is greedy: the seed changes nothing.
- A chat request with ``tools`` whose last message (system messages aside) is the
  user's, with no tool result since the last assistant turn, is answered with one
  call of the first tool, or of
  ``Switches.call_tool`` with ``call_arguments`` (``finish_reason: tool_calls``),
  streamed or not; ``answer_tools=False`` answers with text instead.
- ``Switches.reasoning`` adds ``reasoning_content`` (the words of the answer, reversed)
  before the content, as SGLang's reasoning parser does.
- Token ids come back per SGLang's flags: chat ``return_prompt_token_ids`` /
  ``return_token_ids`` (non-stream only; 400 with stream), the ``x-sglext-*``
  headers for streamed chat, completions ``return_token_ids``, /generate
  ``output_ids`` and ``meta_info``.

Tokens: the prompt is tokenised one id per character; output token ``i`` is word
``WORDS[h % 26]`` with ``h`` a hash of (seed, prompt ids, position), so the same
prompt and seed always give the same words, and continuing a prefix continues it.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import struct
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from seedproxy.sse_frames import DONE, data_frame
from tests.helpers.fake_control import FakeControl

WORDS = [
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
    "juliet", "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo",
    "sierra", "tango", "uniform", "victor", "whiskey", "xray", "yankee", "zulu",
]
VOCAB_BASE = 100_000
BYTE_BASE = VOCAB_BASE + len(WORDS)
"""Ids ``BYTE_BASE + b`` are the byte ``b`` (``Switches.byte_reply``), as a byte-level
BPE's byte tokens: consecutive ones decode together, a lone part of a character to U+FFFD."""
SAMPLING_KEYS = {
    "max_new_tokens", "temperature", "top_p", "top_k", "min_p", "stop", "stop_token_ids",
    "n", "sampling_seed", "ignore_eos", "skip_special_tokens", "frequency_penalty",
    "presence_penalty", "repetition_penalty", "min_new_tokens", "regex", "ebnf",
    "json_schema", "no_stop_trim", "spaces_between_special_tokens", "logit_bias",
    "custom_params", "stop_regex", "structural_tag",
}


@dataclass
class Switches:
    """Knobs a test turns: fail the next requests, slow down, record what came in."""

    fail_next: int = 0
    fail_status: int = 503
    token_delay_s: float = 0.0
    context_length: int = 256
    chars_per_token: int = 1
    """Chat prompts get one id per this many characters of the rendered prompt (1: one
    per character; 4: about what a real tokenizer gives, as bench/long_horizon.py uses)."""
    """A ``max_new_tokens`` of null generates up to here (prompt included), as SGLang
    does up to its context window; left out, it is 16."""
    break_stream_after: int | None = None
    received: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    name: str = "fake-sglang"
    stream_barrier: threading.Barrier | None = None
    """When set, every stream waits at it after its first event: with one party per
    concurrent stream, their events interleave by construction."""
    hold: threading.Event | None = None
    """When set, an OpenAI-route answer waits for it before it ends (a non-streamed
    answer before it is sent, a stream before its ``[DONE]``)."""
    control: FakeControl = field(default_factory=FakeControl)
    flip_at: int | None = None
    """Output position whose token this server gets wrong (a nondeterministic server)."""
    script: list[list[int]] = field(default_factory=list)
    """Output ids for the next /generate requests (one list per request), as a
    model would sample them; finishing as the fake's own answers do."""
    responder: Callable[[list[int]], list[int]] | None = None
    """When set and ``script`` is empty: the output ids for a /generate request, from its
    prompt ids (a scripted model that reads its prompt); finishing as ``script`` does."""
    script_stops: bool = False
    """With ``script``: the output ends at the first id in ``stop_token_ids`` (that id
    included, ``finish_reason {type: stop, matched: id}``), as SGLang stops, unless
    ``ignore_eos``; a script that never meets one runs out as ``length``."""
    answer_tools: bool = True
    call_tool: str | None = None
    call_arguments: dict[str, Any] | None = None
    tool_rounds: int | None = None
    """When set, a chat request with ``tools`` gets a call of the tool while fewer than
    this many tool results follow the last user message (an agent's multi-step loop)."""
    reply_fn: Callable[[list[dict[str, Any]]], str] | None = None
    """When set, OpenAI chat answers are this function of the messages, one token per
    character (a scripted agent that acts by text)."""
    call_arguments_text: str | None = None
    """When set (with ``call_tool``), the call's arguments as this exact text (a model's
    malformed or deeply nested output)."""
    reasoning: bool = False
    stop_after: int | None = None
    """Chat answers end after this many tokens with ``finish_reason: stop`` (a model
    that finishes its turn), whatever ``max_tokens`` allows."""
    reply: str | None = None
    """When set, OpenAI routes answer with this text, one token per character."""
    byte_reply: bool = False
    """With ``reply``: one token per UTF-8 byte instead (``BYTE_BASE``)."""
    error_after: int | None = None
    """Streamed chat, completions and /generate: after this many tokens of a stream,
    the stream ends with an error event, ``data: {"error": {"message", "type", "code":
    error_status}}``, then ``data: [DONE]``, as SGLang and vLLM end a stream that
    fails mid-way (the HTTP status stays 200: the head went out already)."""
    error_status: int = 500
    stall_after: int | None = None
    """Streamed chat, completions and /generate: after this many tokens of a stream,
    the stream stalls (nothing more is sent) until ``stall_release`` is set: a proxy's
    read timeout ends it. ``stall_release`` set, the stream goes on."""
    stall_release: threading.Event = field(default_factory=threading.Event)
    usage_patch: dict[str, Any] | None = None
    """Merged into the ``usage`` of chat and completions answers (a broken server)."""
    detokenize: bool = True
    """False: ``/detokenize`` answers 404, as a server without the route does."""
    detokenized: list[Any] = field(default_factory=list)
    """The bodies ``/detokenize`` received."""
    image_token_id: int | None = None
    """When set, a /generate with ``image_data`` must hold exactly one of this id per
    image (SGLang's ``_expand_input_ids`` expands exactly one per image; any other count
    falls back to re-tokenising, here a 400 so a test sees it)."""
    fetch_images: bool = False
    """Fetch every ``http(s)`` image URL a request names (chat ``image_url`` parts,
    /generate ``image_data``) before answering, as SGLang's ``get_image_bytes`` does."""
    vocab_base: int = VOCAB_BASE
    """/generate's unscripted output ids are ``vocab_base`` + 0..25: set it inside a
    real tokenizer's vocabulary (token-in-token-out mode decodes them)."""


def tokens_for(prompt_ids: list[int], seed: int | None, temperature: float, count: int,
               version: str = "default", base: int = VOCAB_BASE) -> list[int]:
    """Deterministic tokens (ids ``base`` to ``base + 25``); weights other than
    ``default`` give other tokens."""
    greedy = temperature is not None and temperature <= 1e-5
    out: list[int] = []
    weights = "" if version == "default" else f"|w={version}"
    for position in range(len(prompt_ids), len(prompt_ids) + count):
        key = f"{'greedy' if greedy else seed}|{position}|{_tail(prompt_ids + out)}{weights}"
        h = int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big")
        out.append(base + h % len(WORDS))
    return out


ROUTING_COLS = 4  # 2 layers x top-2


def routed_experts_of(sequence: list[int]) -> list[int]:
    """The fake MoE routing: ``ROUTING_COLS`` expert ids (of 64) for each position of
    ``sequence`` but the last."""
    return [(t * 7 + k) % 64 for t in sequence[:-1] for k in range(ROUTING_COLS)]


def routed_experts_b64(sequence: list[int]) -> str:
    ids = routed_experts_of(sequence)
    return base64.b64encode(struct.pack(f"<{len(ids)}i", *ids)).decode()


def flipped(token: int, base: int = VOCAB_BASE) -> int:
    """Another word than ``token``."""
    return base + (token - base + 1) % len(WORDS)


def _tail(ids: list[int]) -> str:
    return ",".join(map(str, ids[-8:]))


def logprob_of(token: int) -> float:
    return -((token * 7919) % 97) / 31.0


def detok(ids: list[int]) -> str:
    out: list[str] = []
    pending = bytearray()
    for i in ids:
        if BYTE_BASE <= i < BYTE_BASE + 256:
            pending.append(i - BYTE_BASE)
            continue
        if i >= BYTE_BASE:  # a real tokenizer's id (scripted): not this vocabulary's
            out.append("\ufffd")
            continue
        if pending:
            out.append(pending.decode("utf-8", errors="replace"))
            pending.clear()
        if i >= BYTE_BASE + 256:  # a real tokenizer's id, past this toy vocabulary
            out.append("\ufffd")
        else:
            out.append(" " + WORDS[i - VOCAB_BASE] if i >= VOCAB_BASE else chr(i))
    if pending:
        out.append(pending.decode("utf-8", errors="replace"))
    return "".join(out)


def tokenize(text: str) -> list[int]:
    return [ord(c) for c in text]


def image_urls(body: dict[str, Any]) -> list[str]:
    """The image URLs of a chat body's ``image_url`` parts and a /generate body's
    ``image_data``, in order (SGLang's image inputs)."""
    urls: list[str] = []
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else []:
            if isinstance(part, dict) and part.get("type") == "image_url":
                field = part.get("image_url")
                urls.append(str(field.get("url") if isinstance(field, dict) else field))
    data = body.get("image_data")
    urls.extend([data] if isinstance(data, str) else data or [])
    return urls


def chat_prompt(messages: list[dict[str, Any]]) -> str:
    parts = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        parts.append(f"<{m.get('role')}>{content or ''}")
        for call in m.get("tool_calls") or []:
            parts.append(f"<call>{orjson.dumps(call).decode()}")
    return "".join(parts) + "<assistant>"


def _tool_call(body: dict[str, Any], ids: list[int], sw: Switches) -> dict[str, Any] | None:
    messages = [m for m in body.get("messages") or [] if m.get("role") != "system"]
    tools = body.get("tools") or []
    if not sw.answer_tools or not tools or not messages:
        return None
    if sw.tool_rounds is not None:
        user = max((k for k, m in enumerate(messages) if m.get("role") == "user"), default=0)
        if sum(m.get("role") == "tool" for m in messages[user:]) >= sw.tool_rounds:
            return None
    else:
        if messages[-1].get("role") != "user":
            return None
        since_assistant = []
        for m in reversed(messages):
            if m.get("role") == "assistant":
                break
            since_assistant.append(m.get("role"))
        if "tool" in since_assistant:
            return None
    names = [(t.get("function") or {}).get("name", "tool") for t in tools]
    name = sw.call_tool if sw.call_tool in names else names[0]
    chosen = sw.call_arguments if sw.call_tool in names else None
    arguments = orjson.dumps(
        chosen if chosen is not None else {"query": detok(ids).strip()}
    ).decode()
    if sw.call_arguments_text is not None and sw.call_tool in names:
        arguments = sw.call_arguments_text
    return {
        "id": f"call_{ids[0]}",
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def _call_piece(call: dict[str, Any], k: int, count: int) -> dict[str, Any]:
    """Streamed tool call: id and name first, the arguments in ``count`` pieces."""
    arguments = call["function"]["arguments"]
    size = len(arguments)
    piece = arguments[k * size // count:(k + 1) * size // count]
    if k == 0:
        return {"index": 0, "id": call["id"], "type": "function",
                "function": {"name": call["function"]["name"], "arguments": piece}}
    return {"index": 0, "function": {"arguments": piece}}


def stream_error_event(status: int) -> bytes:
    """The event SGLang (and vLLM) send in place of the rest of a failing stream."""
    kind = "InternalServerError" if status >= 500 else "BadRequestError"
    body = {"error": {"message": "injected mid-stream failure", "type": kind, "param": None,
                      "code": status}}
    return data_frame(body)


def fresh_id(prefix: str = "") -> str:
    """A new request id, as SGLang gives each request (``uuid4().hex``)."""
    return prefix + uuid.uuid4().hex


def error(message: str, status: int = 400) -> JSONResponse:
    kind = "BadRequestError" if status == 400 else "ServiceUnavailableError"
    return JSONResponse(
        {"object": "error", "message": message, "type": kind, "param": None, "code": status},
        status_code=status,
    )


def create_fake_sglang(switches: Switches | None = None) -> Starlette:
    sw = switches or Switches()

    async def gate(request: Request) -> tuple[dict[str, Any] | None, Response | None]:
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError:
            return None, error("invalid JSON")
        sw.received.append(body)
        sw.headers.append({k.lower(): v for k, v in request.headers.items()})
        if sw.fetch_images:
            async with httpx.AsyncClient() as fetcher:
                for url in image_urls(body):
                    if url.startswith(("http://", "https://")):
                        await fetcher.get(url)
        if sw.fail_next > 0:
            sw.fail_next -= 1
            return None, error("injected failure", sw.fail_status)
        return body, None

    async def generate(request: Request) -> Response:
        body, failed = await gate(request)
        if failed:
            return failed
        assert body is not None
        params = body.get("sampling_params") or {}
        unknown = set(params) - SAMPLING_KEYS
        if unknown:
            return error(f"unknown sampling_params: {sorted(unknown)}")
        seed = params.get("sampling_seed", 42)
        if isinstance(seed, bool) or not isinstance(seed, int):
            return error("sampling_seed must be an integer")
        prompt = body.get("input_ids") or tokenize(body.get("text") or "")
        images = body.get("image_data") or []
        if sw.image_token_id is not None and images and (
                prompt.count(sw.image_token_id) != len(images)):
            return error(f"{prompt.count(sw.image_token_id)} image tokens for "
                         f"{len(images)} images in image_data")
        limit = params.get("max_new_tokens", 16)
        count = max(0, sw.context_length - len(prompt) - 1) if limit is None else int(limit)
        temperature = params.get("temperature", 1.0)
        n = int(params.get("n", 1))
        control = sw.control
        await control.admit()
        scripted = sw.script.pop(0) if sw.script else (
            sw.responder(list(prompt)) if sw.responder is not None else None)
        stop_at: int | None = None
        if scripted is not None:
            count = len(scripted)
            stops = set(params.get("stop_token_ids") or [])
            if sw.script_stops and not params.get("ignore_eos"):
                stop_at = next((k for k, t in enumerate(scripted) if t in stops), None)
                count = count if stop_at is None else stop_at + 1

        def item(run: Any, sofar: list[int], finish: dict[str, Any] | None,
                 index: int = 0) -> dict[str, Any]:
            meta: dict[str, Any] = {
                "id": run.rid,
                "finish_reason": finish,
                "prompt_tokens": len(prompt),
                "completion_tokens": len(sofar),
                "cached_tokens": 0,
                "e2e_latency": 0.001,
                "weight_version": control.version,
                "weight_versions": run.spans(),
            }
            if body.get("return_logprob"):
                meta["output_token_logprobs"] = [[logprob_of(t), t, None] for t in sofar]
            if body.get("return_routed_experts") and finish is not None:
                meta["routed_experts"] = routed_experts_b64(prompt + sofar)
            out = {"text": detok(sofar), "output_ids": list(sofar), "meta_info": meta}
            if n > 1:
                out["index"] = index
            return out

        async def produce(index: int):  # (run, tokens so far, finish) after each token
            run = control.start(body.get("rid") if n == 1 else None)
            ids: list[int] = []
            try:
                for _ in range(count):
                    await asyncio.sleep(sw.token_delay_s)
                    if not await control.step(run):
                        yield run, ids, {"type": "abort", "message": "Abort in waiting queue"}
                        return
                    token = (scripted[len(ids)] if scripted is not None
                             else tokens_for(prompt + ids, seed, temperature, 1, control.version,
                                             sw.vocab_base)[0])
                    ids.append(flipped(token, sw.vocab_base) if len(ids) == sw.flip_at else token)
                    run.versions.append(control.version)
                    await control.checkpoint(len(ids))
                    done = len(ids) == count
                    finish = ({"type": "stop", "matched": ids[-1]} if stop_at is not None
                              else {"type": "length", "length": count})
                    yield run, ids, finish if done else None
                if count == 0:
                    yield run, ids, {"type": "length", "length": 0}
            finally:
                control.finish(run)

        if body.get("stream"):
            async def events():  # cumulative chunks, SGLang's default
                for index in range(n):
                    chunks = produce(index)
                    try:
                        async for run, sofar, finish in chunks:
                            if sw.error_after is not None and len(sofar) > sw.error_after:
                                yield stream_error_event(sw.error_status)
                                yield DONE
                                return
                            if sw.stall_after is not None and len(sofar) > sw.stall_after:
                                await asyncio.to_thread(sw.stall_release.wait, 60)
                            yield data_frame(item(run, sofar, finish, index))
                    finally:
                        await chunks.aclose()
                yield DONE

            return StreamingResponse(events(), media_type="text/event-stream")
        items = []
        for index in range(n):
            last = None
            async for run, sofar, finish in produce(index):
                last = item(run, sofar, finish, index)
            items.append(last)
        return JSONResponse(items if n > 1 else items[0])

    async def openai_route(request: Request, chat: bool) -> Response:
        body, failed = await gate(request)
        if failed:
            return failed
        assert body is not None
        await sw.control.admit()
        seed = body.get("seed", 42) if body.get("seed") is not None else 42
        if isinstance(seed, bool) or not isinstance(seed, int):
            return error("seed must be an integer")
        stream = body.get("stream") is True
        if (
            chat
            and stream
            and (body.get("return_token_ids") or body.get("return_prompt_token_ids"))
        ):
            return error("return_token_ids is not supported with streaming")
        finish = "length"
        if chat:
            prompt = tokenize(chat_prompt(body.get("messages") or []))[::sw.chars_per_token]
            count = body.get("max_completion_tokens") or body.get("max_tokens") or 8
            if sw.stop_after is not None and count > sw.stop_after:
                count, finish = sw.stop_after, "stop"
        else:
            raw = body.get("prompt")
            prompt = (
                raw
                if isinstance(raw, list) and all(isinstance(x, int) for x in raw)
                else tokenize(str(raw))
            )
            count = body.get("max_tokens") or 8
        temperature = body.get("temperature", 1.0)
        n = int(body.get("n") or 1)
        ids = tokens_for(prompt, seed, temperature if temperature is not None else 1.0, int(count))
        if sw.flip_at is not None and sw.flip_at < len(ids):
            ids[sw.flip_at] = flipped(ids[sw.flip_at])
        if sw.reply is not None:
            ids = ([BYTE_BASE + b for b in sw.reply.encode()] if sw.byte_reply
                   else tokenize(sw.reply))[: int(count)]
        if sw.reply_fn is not None and chat:
            ids, finish = tokenize(sw.reply_fn(body.get("messages") or [])), "stop"
        want_lp = bool(body.get("logprobs")) if chat else body.get("logprobs") is not None
        obj = "chat.completion" if chat else "text_completion"
        # SGLang's answer id is the request's rid (a fresh uuid when none is given), and
        # ``created`` is the clock: neither repeats when a request is run again.
        rid = body.get("rid")
        cid = rid if isinstance(rid, str) and rid else fresh_id()
        created = int(time.time())

        def logprobs(tokens: list[int]) -> Any:
            if not want_lp:
                return None
            if chat:
                return {
                    "content": [
                        {
                            "token": detok([t]).strip() or detok([t]),
                            "logprob": logprob_of(t),
                            "bytes": None,
                            "top_logprobs": [],
                        }
                        for t in tokens
                    ]
                }
            return {
                "tokens": [WORDS[t - VOCAB_BASE] for t in tokens],
                "token_logprobs": [logprob_of(t) for t in tokens],
                "top_logprobs": [{} for _ in tokens],
                "text_offset": [0 for _ in tokens],
            }

        call = _tool_call(body, ids, sw) if chat else None
        reasoning = " ".join(reversed(detok(ids).split())) if chat and sw.reasoning else None
        usage = {"prompt_tokens": len(prompt), "completion_tokens": len(ids) * n,
                 "total_tokens": len(prompt) + len(ids) * n}
        if sw.usage_patch is not None:
            usage.update(sw.usage_patch)
        if not stream:
            run = sw.control.start(body.get("rid"))
            try:  # token by token, so that a pause or an abort can reach it
                for k in range(len(ids)):
                    await asyncio.sleep(sw.token_delay_s)
                    if not await sw.control.step(run):
                        ids, finish = ids[:k], "abort"
                        break
                    await sw.control.checkpoint(k + 1)
            finally:
                sw.control.finish(run)
            if sw.hold is not None:
                await asyncio.to_thread(sw.hold.wait)
            choices = []
            for i in range(n):
                choice: dict[str, Any] = {
                    "index": i,
                    "logprobs": logprobs(ids),
                    "finish_reason": finish,
                }
                if chat:
                    choice["message"] = {"role": "assistant", "content": detok(ids).strip()}
                    if call is not None:
                        choice["message"] = {
                            "role": "assistant",
                            "content": None,
                            "tool_calls": [call],
                        }
                        choice["finish_reason"] = "tool_calls"
                    if reasoning is not None:
                        choice["message"]["reasoning_content"] = reasoning
                    if body.get("return_prompt_token_ids") or body.get("return_token_ids"):
                        choice["prompt_token_ids"] = prompt
                    if body.get("return_token_ids"):
                        choice["response_token_ids"] = ids
                else:
                    choice["text"] = detok(ids)
                    if body.get("return_token_ids"):
                        choice["token_ids"] = ids
                        choice["prompt_token_ids"] = prompt
                choices.append(choice)
            answer = {"id": cid, "object": obj, "created": created, "model": sw.name,
                      "choices": choices, "usage": usage}
            if chat:
                answer["metadata"] = {"weight_version": sw.control.version}
            return JSONResponse(answer)

        headers = {k.lower(): v for k, v in request.headers.items()}

        async def events():
            sent = 0
            run = sw.control.start(body.get("rid"))
            finish_now = finish
            produced = list(ids)
            if reasoning is not None:
                for k, word in enumerate(reasoning.split()):
                    delta = {"reasoning_content": word if k == 0 else " " + word}
                    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
                    yield data_frame(
                        {
                            "id": cid,
                            "object": obj + ".chunk",
                            "created": created,
                            "model": sw.name,
                            "choices": [choice],
                        }
                    )
            for i in range(n):
                for k, token in enumerate(ids):
                    await asyncio.sleep(sw.token_delay_s)
                    if not await sw.control.step(run):
                        finish_now, produced = "abort", ids[:k]
                        break
                    if sw.break_stream_after is not None and sent >= sw.break_stream_after:
                        raise ConnectionResetError("injected stream break")
                    if sw.error_after is not None and k >= sw.error_after:
                        sw.control.finish(run)
                        yield stream_error_event(sw.error_status)
                        yield DONE
                        return
                    if sw.stall_after is not None and k >= sw.stall_after:
                        await asyncio.to_thread(sw.stall_release.wait, 60)
                    sent += 1
                    text = detok([token])
                    if chat:
                        delta = {"content": text.strip() if k == 0 else text}
                        if call is not None:
                            delta = {"tool_calls": [_call_piece(call, k, len(ids))]}
                        if k == 0:
                            delta["role"] = "assistant"
                        choice = {
                            "index": i,
                            "delta": delta,
                            "logprobs": logprobs([token]),
                            "finish_reason": None,
                        }
                    else:
                        choice = {
                            "index": i,
                            "text": text,
                            "logprobs": logprobs([token]),
                            "finish_reason": None,
                        }
                        if body.get("return_token_ids"):
                            choice["token_ids"] = [token]
                            if k == 0:
                                choice["prompt_token_ids"] = prompt
                    chunk = {
                        "id": cid,
                        "object": obj + ".chunk" if chat else obj,
                        "created": created,
                        "model": sw.name,
                        "choices": [choice],
                    }
                    yield data_frame(chunk)
                    if sent == 1 and sw.stream_barrier is not None:
                        await asyncio.to_thread(sw.stream_barrier.wait, 30)
                    await sw.control.checkpoint(k + 1)
                ended = finish_now if call is None or finish_now == "abort" else "tool_calls"
                end = {"index": i, "logprobs": None, "finish_reason": ended}
                end.update({"delta": {}} if chat else {"text": ""})
                yield data_frame({"id": cid, "object": obj, "created": created,
                                 "model": sw.name, "choices": [end]})
            sglext: dict[str, Any] = {}
            if chat and headers.get("x-sglext-return-input-ids") == "1":
                sglext["input_ids"] = prompt
            if chat and headers.get("x-sglext-return-output-ids") == "1":
                sglext["output_ids"] = [produced for _ in range(n)]
            if sglext:
                yield data_frame(
                    {
                        "id": cid,
                        "object": obj,
                        "created": created,
                        "model": sw.name,
                        "choices": [],
                        "sglext": sglext,
                    }
                )
            if (body.get("stream_options") or {}).get("include_usage"):
                yield data_frame(
                    {
                        "id": cid,
                        "object": obj,
                        "created": created,
                        "model": sw.name,
                        "choices": [],
                        "usage": usage,
                    }
                )
            if sw.hold is not None:
                await asyncio.to_thread(sw.hold.wait)
            sw.control.finish(run)
            yield DONE

        return StreamingResponse(events(), media_type="text/event-stream")

    async def chat(request: Request) -> Response:
        return await openai_route(request, chat=True)

    async def completions(request: Request) -> Response:
        return await openai_route(request, chat=False)

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [
            {"id": sw.name, "object": "model", "created": int(time.time()), "owned_by": "sglang"}
        ]})

    async def health(request: Request) -> Response:
        return Response(status_code=200)

    async def detokenize(request: Request) -> Response:
        """SGLang's ``/detokenize``: ``{"tokens": [ids]}`` -> ``{"text": str}``, or
        ``{"tokens": [[ids], ...]}`` -> ``{"text": [str, ...]}``; each request is kept
        in ``Switches.detokenized``, and ``detokenize=False`` answers 404."""
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError:
            return error("invalid JSON")
        sw.detokenized.append(body)
        if not sw.detokenize:
            return JSONResponse({"detail": "Not Found"}, status_code=404)
        tokens = body.get("tokens") if isinstance(body, dict) else None
        batch = isinstance(tokens, list) and bool(tokens) and isinstance(tokens[0], list)
        rows = tokens if batch else [tokens]
        top = BYTE_BASE + 256
        if not isinstance(rows, list) or not all(isinstance(row, list) and all(
            isinstance(t, int) and 0 <= t < top and not 0xD800 <= t < 0xE000 for t in row
        ) for row in rows):
            return error("tokens must be a list of token ids, or a list of such lists")
        texts = [detok(row) for row in rows]
        return JSONResponse({"text": texts if batch else texts[0]})

    async def tokenize_route(request: Request) -> Response:
        body = await request.json()
        prompt = body.get("prompt") if isinstance(body, dict) else None
        if not isinstance(prompt, str):
            return error("prompt must be a string")
        ids = tokenize(prompt)
        return JSONResponse({"tokens": ids, "count": len(ids), "max_model_len": 4096})

    return Starlette(routes=[
        *sw.control.routes(),
        Route("/tokenize", tokenize_route, methods=["POST"]),
        Route("/v1/tokenize", tokenize_route, methods=["POST"]),
        Route("/generate", generate, methods=["POST"]),
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/health_generate", health, methods=["GET"]),
        Route("/detokenize", detokenize, methods=["POST"]),
    ])
