"""``/v1/chat/completions``: chat template in, SGLang-shaped OpenAI answers out.

Invariants (SGLang's ``serving_chat.py``):
- ``return_prompt_token_ids``/``return_token_ids`` put ``prompt_token_ids`` /
  ``response_token_ids`` on each non-streaming choice; with ``stream`` they are a 400.
- Headers ``x-sglext-return-input-ids: 1`` / ``x-sglext-return-output-ids: 1`` add a
  response-level ``sglext`` (``input_ids``, ``output_ids`` per choice); a stream sends it
  in a ``choices: []`` chunk after the finish chunks, before the usage chunk.
- ``stream_options.continuous_usage_stats`` puts the usage so far in every chunk that
  carries a choice.
- ``tool_choice: "required"`` or a named function constrains the output with the schema
  of ``seedproxy.tool_choice`` (only the named tool rendered) and reads it back as
  ``tool_calls`` (a stop becomes ``finish_reason: "tool_calls"``; text that is not a call
  array stays content); a stream holds the text and sends the calls whole before the
  finish chunk. With another constraint it is a 400.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from ..errors import BadRequest
from ..sse_frames import DONE
from ..template_input import render_options, rendered, template_messages
from ..tool_choice import Forcing, ToolChoiceError, forcing_of, parse_forced, tools_rendered
from .errors import RequestError
from .generator import Update
from .params import want_bool, want_int
from .state import EngineState, OpenAIJob, openai_sampling_params, request_id, usage

__all__ = ["ChatJob", "chat_response", "chat_stream", "parse_chat", "render_messages"]


@dataclass(frozen=True)
class ChatJob(OpenAIJob):
    logprobs: bool
    top_logprobs: int
    return_prompt_ids: bool
    return_token_ids: bool
    sglext_input: bool
    sglext_output: bool
    forced: bool
    """``tool_choice`` forces a call: the text is read back as tool calls."""


def render_messages(state: EngineState, body: dict[str, Any]) -> list[int]:
    """The prompt ids of the chat ``body`` (with its tools) under the chat template, which
    gets the messages and options of ``template_input``."""
    tok = state.model.tokenizer
    messages, tools = body.get("messages"), body.get("tools")
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty list", param="messages")
    if not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
        raise RequestError("each message needs a string role", param="messages")
    try:
        options = render_options(body, state.template_reserved)
        messages = template_messages(messages, state.content_format)
        if tools is not None and not isinstance(tools, list):
            raise RequestError("tools must be a list", param="tools")
        text = rendered(tok, messages, tools, options)
    except BadRequest as exc:  # a bad field of this request, named by a shared rule
        raise RequestError(exc.message, param=exc.param) from None
    return state.check_prompt(list(tok.encode(text, add_special_tokens=False)))


def parse_chat(state: EngineState, body: dict[str, Any], headers: Any) -> ChatJob:
    stream = want_bool(body, "stream")
    ret_prompt = want_bool(body, "return_prompt_token_ids")
    ret_tokens = want_bool(body, "return_token_ids")
    if stream and ret_prompt:
        raise RequestError(
            "return_prompt_token_ids is not supported with streaming. "
            "Please set stream=false when using return_prompt_token_ids=true.")
    if stream and ret_tokens:
        raise RequestError(
            "return_token_ids is not supported with streaming on /v1/chat/completions. "
            "Please set stream=false when using return_token_ids=true.")
    forcing = _forcing(body)
    if body.get("tools") and (body.get("tool_choice") == "none" or (
            forcing is not None and forcing.name is not None)):
        body = {**body, "tools": tools_rendered(body, forcing)}  # none, or the named one
    prompt = render_messages(state, body)
    if forcing is not None:
        body = {**body, "json_schema": forcing.schema}
    params = openai_sampling_params(body, state.model.vocab_size, None)
    grammar = state.grammar([prompt], params, params.max_new_tokens)
    logprobs = want_bool(body, "logprobs")
    top = want_int(body, "top_logprobs", 0) or 0
    if top < 0 or top > 20:
        raise RequestError("top_logprobs must be between 0 and 20", param="top_logprobs")
    reqs = state.fan_out(request_id(body), [prompt], params, grammar, return_logprob=logprobs,
                         top_logprobs_num=top if logprobs else 0)
    return ChatJob(
        reqs=reqs, **OpenAIJob.fields(state, body), logprobs=logprobs, top_logprobs=top,
        return_prompt_ids=ret_prompt or ret_tokens, return_token_ids=ret_tokens,
        sglext_input=headers.get("x-sglext-return-input-ids") == "1",
        sglext_output=headers.get("x-sglext-return-output-ids") == "1",
        forced=forcing is not None,
    )


def _forcing(body: dict[str, Any]) -> Forcing | None:
    try:
        forcing = forcing_of(body)
    except ToolChoiceError as exc:
        raise RequestError(exc.message, param=exc.param) from None
    fmt = body.get("response_format")
    constrained = any(body.get(k) is not None for k in ("regex", "ebnf", "json_schema")) or (
        isinstance(fmt, dict) and fmt.get("type") not in (None, "text"))
    if forcing is not None and constrained:
        raise RequestError("tool_choice 'required' or a named tool cannot be combined with "
                           "response_format, regex, or ebnf: the tool-call constraint and "
                           "the output constraint cannot both be honored.",
                           param="tool_choice")
    return forcing


def _ending(job: ChatJob, upd: Update) -> tuple[list[dict[str, Any]] | None, Any, Any]:
    """A forced answer's tool calls (SGLang-shaped, fresh ``call_`` ids), finish_reason
    and matched_stop: a stop that made calls is ``tool_calls``."""
    parsed = parse_forced(upd.text) if job.forced else None
    fin = upd.finish or {}
    if parsed is None:
        return None, fin.get("type"), fin.get("matched")
    calls = [{"id": f"call_{uuid.uuid4().hex[:24]}", "index": k, "type": "function",
              "function": {"name": name, "arguments": arguments}}
             for k, (name, arguments) in enumerate(parsed)]
    stop = fin.get("type") == "stop"
    return calls, "tool_calls" if stop else fin.get("type"), None if stop else fin.get("matched")


def _logprob_content(state: EngineState, upd: Update, start: int, stop: int
                     ) -> list[dict[str, Any]]:
    def entry(token_id: int, logprob: float) -> dict[str, Any]:
        text = state.token_text(token_id)
        return {"token": text, "bytes": list(text.encode()), "logprob": logprob}

    return [{**entry(upd.output_ids[i], upd.logprobs[i]), "top_logprobs": [
        entry(tid, lp) for tid, lp in upd.top_logprobs[i]] if i < len(upd.top_logprobs) else []}
        for i in range(start, stop)]


def _sglext(job: ChatJob, finals: list[Update]) -> dict[str, Any] | None:
    ext: dict[str, Any] = {}
    if job.sglext_input:
        ext["input_ids"] = list(job.reqs[0].prompt_ids)
    if job.sglext_output:
        ext["output_ids"] = [list(u.output_ids) for u in finals]
    return ext or None


async def chat_response(state: EngineState, job: ChatJob) -> dict[str, Any]:
    ends = await state.run_all(job.reqs)
    choices = []
    for idx, upd in enumerate(ends):
        calls, finish, matched = _ending(job, upd)
        choice: dict[str, Any] = {
            "index": idx,
            "message": {"role": "assistant", "content": upd.text if calls is None else "",
                        "reasoning_content": None, "tool_calls": calls},
            "logprobs": {"content": _logprob_content(state, upd, 0, len(upd.output_ids))}
            if job.logprobs else None,
            "finish_reason": finish,
            "matched_stop": matched,
        }
        if job.return_prompt_ids:
            choice["prompt_token_ids"] = list(job.reqs[idx].prompt_ids)
        if job.return_token_ids:
            choice["response_token_ids"] = list(upd.output_ids)
        choices.append(choice)
    ext = _sglext(job, ends)
    return {"id": job.reqs[0].rid, "object": "chat.completion", "created": int(time.time()),
            "model": job.model, "choices": choices, "usage": usage(ends[0].prompt_tokens, ends),
            "metadata": {"weight_version": ends[0].weight_version},
            **({"sglext": ext} if ext is not None else {})}


def _chunk(job: ChatJob, choices: list[dict[str, Any]], **extra: Any) -> bytes:
    return job.chunk("chat.completion.chunk", choices, **extra)


def _delta(idx: int, delta: dict[str, Any], logprobs: Any = None, finish: Any = None,
           matched: Any = None) -> dict[str, Any]:
    """A stream choice as SGLang writes it: every delta has ``reasoning_content`` (null)."""
    return {"index": idx, "delta": {"reasoning_content": None, **delta}, "logprobs": logprobs,
            "finish_reason": finish, "matched_stop": matched}


async def chat_stream(state: EngineState, job: ChatJob) -> AsyncIterator[bytes]:
    finals: list[Update] = []
    prompt_tokens = len(job.reqs[0].prompt_ids)

    def running(n_tokens: int) -> dict[str, Any]:
        return {"usage": usage(prompt_tokens, n_tokens)} if job.continuous_usage else {}

    for idx, req in enumerate(job.reqs):
        yield _chunk(job, [_delta(idx, {"role": "assistant", "content": ""})], **running(0))
        sent_text, sent_tokens = 0, 0
        async for upd in state.worker.stream(req):
            delta = "" if job.forced else upd.text[sent_text:]
            n_tok = len(upd.logprobs) if job.logprobs else sent_tokens
            if delta or n_tok > sent_tokens:
                lp = ({"content": _logprob_content(state, upd, sent_tokens, n_tok)}
                      if job.logprobs else None)
                yield _chunk(job, [_delta(idx, {"content": delta}, lp)],
                             **running(upd.completion_tokens))
                sent_text, sent_tokens = len(upd.text), n_tok
            if upd.finish is not None:
                finals.append(upd)
    for idx, upd in enumerate(finals):
        calls, finish, matched = _ending(job, upd)
        if job.forced:  # held back: the calls whole, or the text that is none
            held = {"tool_calls": calls} if calls is not None else {"content": upd.text}
            yield _chunk(job, [_delta(idx, held)], **running(upd.completion_tokens))
        yield _chunk(job, [_delta(idx, {}, None, finish, matched)],
                     **running(upd.completion_tokens))
    ext = _sglext(job, finals)
    if ext is not None:
        yield _chunk(job, [], sglext=ext)
    if job.include_usage:
        yield _chunk(job, [], usage=usage(finals[0].prompt_tokens, finals))
    yield DONE
