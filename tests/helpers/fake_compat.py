"""Test upstreams that behave like vLLM and like a strict OpenAI-compatible server.

Tokens come from ``fake_sglang.tokens_for`` (same prompt and seed, same words). A
request without ``seed`` draws a random one, as both real servers do.

- ``create_fake_vllm``: ``seed`` on chat, completions and responses (a streamed
  Responses answer is ``response.created``, its message item's ``output_item.added``,
  one ``output_text.delta``, ``output_item.done``, then ``response.completed``); with
  ``return_token_ids``, chat answers carry ``prompt_token_ids`` at the top (the first
  chunk's top when streaming) and ``choices[].token_ids`` (deltas when streaming);
  completions carry both per choice. Unknown fields are ignored, as vLLM does.
- ``create_fake_openai``: refuses any field outside OpenAI's API (so SGLang's or
  vLLM's extras are a 400), needs ``Authorization: Bearer <api_key>`` when given one,
  returns no token ids, and spells logprob tokens ``token_id:N`` when
  ``tokens_as_ids`` is set. It has no ``/health`` route.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from seedproxy.sse_frames import DONE, data_frame, typed_frame
from tests.helpers.fake_sglang import (
    VOCAB_BASE,
    WORDS,
    chat_prompt,
    detok,
    logprob_of,
    tokenize,
    tokens_for,
)

__all__ = ["CompatSwitches", "create_fake_openai", "create_fake_vllm"]

OPENAI_CHAT_FIELDS = {
    "model",
    "messages",
    "frequency_penalty",
    "logit_bias",
    "logprobs",
    "top_logprobs",
    "max_tokens",
    "max_completion_tokens",
    "n",
    "presence_penalty",
    "response_format",
    "seed",
    "stop",
    "stream",
    "stream_options",
    "temperature",
    "top_p",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "user",
    "metadata",
    "store",
    "reasoning_effort",
}
OPENAI_COMPLETION_FIELDS = {
    "model",
    "prompt",
    "best_of",
    "echo",
    "frequency_penalty",
    "logit_bias",
    "logprobs",
    "max_tokens",
    "n",
    "presence_penalty",
    "seed",
    "stop",
    "stream",
    "stream_options",
    "suffix",
    "temperature",
    "top_p",
    "user",
}


@dataclass
class CompatSwitches:
    received: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    api_key: str | None = None
    tokens_as_ids: bool = False
    name: str = "fake-model"


def create_fake_vllm(switches: CompatSwitches | None = None) -> Starlette:
    return _create(switches or CompatSwitches(), vllm=True)


def create_fake_openai(switches: CompatSwitches | None = None) -> Starlette:
    return _create(switches or CompatSwitches(), vllm=False)


def _error(message: str, status: int = 400) -> JSONResponse:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return JSONResponse(
        {"error": {"message": message, "type": kind, "param": None, "code": None}},
        status_code=status,
    )


def _create(sw: CompatSwitches, *, vllm: bool) -> Starlette:
    async def gate(
        request: Request, allowed: set[str] | None
    ) -> tuple[dict[str, Any], Response | None]:
        body = orjson.loads(await request.body())
        sw.received.append(body)
        sw.headers.append({k.lower(): v for k, v in request.headers.items()})
        if (
            sw.api_key is not None
            and request.headers.get("authorization") != f"Bearer {sw.api_key}"
        ):
            return body, _error("Incorrect API key provided", 401)
        if not vllm and allowed is not None:
            unknown = sorted(set(body) - allowed)
            if unknown:
                return body, _error(f"Unrecognized request argument supplied: {unknown[0]}")
        seed = body.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            return body, _error("seed must be an integer")
        return body, None

    def draw(body: dict[str, Any], prompt: list[int], count: int) -> list[int]:
        seed = body.get("seed")
        seed = random.randrange(2**31) if seed is None else seed
        temperature = body.get("temperature")
        return tokens_for(prompt, seed, 1.0 if temperature is None else temperature, count)

    def token_text(token: int) -> str:
        return f"token_id:{token}" if sw.tokens_as_ids else WORDS[token - VOCAB_BASE]

    async def route(request: Request, chat: bool) -> Response:
        body, failed = await gate(request, OPENAI_CHAT_FIELDS if chat else OPENAI_COMPLETION_FIELDS)
        if failed:
            return failed
        if chat:
            prompt = tokenize(chat_prompt(body.get("messages") or []))
            count = body.get("max_completion_tokens") or body.get("max_tokens") or 8
        else:
            raw = body.get("prompt")
            ok = isinstance(raw, list) and all(isinstance(x, int) for x in raw)
            prompt = raw if ok else tokenize(str(raw))
            count = body.get("max_tokens") or 8
        n = int(body.get("n") or 1)
        outs = [draw(body, prompt, int(count)) for _ in range(n)]
        # a fresh id per request and the clock, as vLLM and OpenAI give
        cid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        created = int(time.time())
        ids_on = vllm and body.get("return_token_ids") is True
        want_lp = bool(body.get("logprobs")) if chat else body.get("logprobs") is not None
        obj = "chat.completion" if chat else "text_completion"

        def logprobs(tokens: list[int]) -> Any:
            if not want_lp:
                return None
            if chat:
                return {
                    "content": [
                        {
                            "token": token_text(t),
                            "logprob": logprob_of(t),
                            "bytes": None,
                            "top_logprobs": [],
                        }
                        for t in tokens
                    ]
                }
            return {
                "tokens": [token_text(t) for t in tokens],
                "token_logprobs": [logprob_of(t) for t in tokens],
                "top_logprobs": [{} for _ in tokens],
                "text_offset": [0 for _ in tokens],
            }

        usage = {
            "prompt_tokens": len(prompt),
            "completion_tokens": sum(map(len, outs)),
            "total_tokens": len(prompt) + sum(map(len, outs)),
        }
        if not body.get("stream"):
            choices = []
            for i, ids in enumerate(outs):
                choice: dict[str, Any] = {
                    "index": i,
                    "logprobs": logprobs(ids),
                    "finish_reason": "length",
                }
                if chat:
                    choice["message"] = {"role": "assistant", "content": detok(ids).strip()}
                else:
                    choice["text"] = detok(ids)
                    if ids_on:
                        choice["prompt_token_ids"] = prompt
                if ids_on:
                    choice["token_ids"] = ids
                choices.append(choice)
            answer: dict[str, Any] = {
                "id": cid,
                "object": obj,
                "created": created,
                "model": sw.name,
                "choices": choices,
                "usage": usage,
            }
            if chat and ids_on:
                answer["prompt_token_ids"] = prompt
            return JSONResponse(answer)

        async def events() -> Any:
            first = True
            for i, ids in enumerate(outs):
                for k, token in enumerate(ids):
                    await asyncio.sleep(0)
                    text = detok([token])
                    if chat:
                        delta = {"content": text.strip() if k == 0 else text}
                        choice: dict[str, Any] = {
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
                        if ids_on and k == 0:
                            choice["prompt_token_ids"] = prompt
                    if ids_on:
                        choice["token_ids"] = [token]
                    chunk: dict[str, Any] = {
                        "id": cid,
                        "object": obj + ".chunk" if chat else obj,
                        "created": created,
                        "model": sw.name,
                        "choices": [choice],
                    }
                    if chat and ids_on and first:
                        chunk["prompt_token_ids"] = prompt
                    first = False
                    yield data_frame(chunk)
                end: dict[str, Any] = {"index": i, "logprobs": None, "finish_reason": "length"}
                end.update({"delta": {}} if chat else {"text": ""})
                yield data_frame(
                    {
                        "id": cid,
                        "object": obj,
                        "created": created,
                        "model": sw.name,
                        "choices": [end],
                    }
                )
            yield DONE

        return StreamingResponse(events(), media_type="text/event-stream")

    async def chat(request: Request) -> Response:
        return await route(request, chat=True)

    async def completions(request: Request) -> Response:
        return await route(request, chat=False)

    async def responses(request: Request) -> Response:
        body, failed = await gate(request, None)
        if failed:
            return failed
        if not vllm and "seed" in body:
            return _error("Unknown parameter: 'seed'.")
        raw = body.get("input")
        text = raw if isinstance(raw, str) else orjson.dumps(raw).decode()
        ids = draw(body, tokenize(text), int(body.get("max_output_tokens") or 8))
        answer = {
            "id": "resp_" + uuid.uuid4().hex,
            "object": "response",
            "created_at": int(time.time()),
            "model": sw.name,
            "status": "completed",
            "output": [
                {
                    "id": "msg_" + uuid.uuid4().hex,
                    "type": "message",
                    "role": "assistant",
                    "status": "completed",
                    "content": [
                        {"type": "output_text", "text": detok(ids).strip(), "annotations": []}
                    ],
                }
            ],
            "usage": {
                "input_tokens": len(text),
                "output_tokens": len(ids),
                "total_tokens": len(text) + len(ids),
            },
        }
        if body.get("stream"):
            return StreamingResponse(_response_events(answer), media_type="text/event-stream")
        return JSONResponse(answer)

    async def models(request: Request) -> Response:
        return JSONResponse(
            {
                "object": "list",
                "data": [{"id": sw.name, "object": "model", "created": 1, "owned_by": "fake"}],
            }
        )

    async def health(request: Request) -> Response:
        return Response(status_code=200)

    routes = [
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/responses", responses, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
    ]
    if vllm:
        routes.append(Route("/health", health, methods=["GET"]))
    return Starlette(routes=routes)


def _response_events(answer: dict[str, Any]) -> Any:
    """A whole Responses answer as the stream of events that builds it."""
    item = answer["output"][0]
    events = [
        {"type": "response.created", "response": {**answer, "status": "in_progress",
                                                  "output": []}},
        {"type": "response.output_item.added", "output_index": 0,
         "item": {**item, "status": "in_progress", "content": []}},
        {"type": "response.output_text.delta", "item_id": item["id"], "output_index": 0,
         "content_index": 0, "delta": item["content"][0]["text"]},
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {"type": "response.completed", "response": answer},
    ]

    async def stream() -> Any:
        for k, event in enumerate(events):
            yield typed_frame({**event, "sequence_number": k})

    return stream()
