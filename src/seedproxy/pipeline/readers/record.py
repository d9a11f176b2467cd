"""A request answered from a recorded interaction (a resumed session): no upstream call.

The whole answer is the recorded one. A stream is rebuilt from it as canonical chunks
(one per part: reasoning, content, tool calls, finish, usage) that the client
protocol's presenter shows as usual; for Messages, chat chunks that add up to the
recorded Message again. The record gets the recorded answer, tokens and lineage.
"""

from __future__ import annotations

import copy
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import orjson

from ...bridges.anthropic import STOP_REASONS
from ...dialects import Captured, Endpoint
from ...sessions import ChoiceRecord, Interaction
from . import Reader

if TYPE_CHECKING:
    from ..call import UpstreamCall
    from ..context import RequestContext

__all__ = ["RecordReader"]

_FINISH = {reason: finish for finish, reason in reversed(STOP_REASONS.items())}
"""Messages ``stop_reason`` -> the chat ``finish_reason`` it came from."""


class RecordReader(Reader):
    def __init__(self, ctx: RequestContext, recorded: Interaction, *, messages: bool) -> None:
        """``messages``: the client speaks Anthropic's Messages (its record a Message)."""
        self._recorded = recorded
        self._messages = messages
        self._endpoint = ctx.client.endpoint
        self._body = ctx.client.body
        self._basis = ctx.basis or ""
        self._created = int(time.time())

    async def whole(self) -> tuple[Any, Captured]:
        return copy.deepcopy(self._recorded.response), self.captured()

    async def chunks(self, call: UpstreamCall) -> AsyncIterator[dict[str, Any] | bytes]:
        answer = self._recorded.response
        if not isinstance(answer, dict):
            return
        if self._messages:
            parts = self._message_chunks(answer)
        elif self._endpoint is Endpoint.GENERATE:
            parts = [copy.deepcopy(answer)]
        elif self._endpoint is Endpoint.COMPLETIONS:
            parts = self._completion_chunks(answer)
        else:
            parts = self._chat_chunks(answer)
        for part in parts:
            yield part

    def captured(self) -> Captured:
        recorded = self._recorded
        choices = [ChoiceRecord.from_storage(c.storage()) for c in recorded.choices]
        return Captured(recorded.prompt_token_ids.tolist(), choices,
                        lineage=copy.deepcopy(recorded.tito))

    def recorded(self, shown: Any) -> Any:
        return copy.deepcopy(self._recorded.response)

    # -- rebuilding a stream -------------------------------------------------------

    def _chunk(self, index: int, delta: dict[str, Any], finish: Any = None,
               **extra: Any) -> dict[str, Any]:
        choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish,
                  **extra}
        return {"id": "chatcmpl-" + self._basis, "object": "chat.completion.chunk",
                "created": self._created, "model": self._body.get("model"),
                "choices": [choice]}

    def _usage(self, usage: Any) -> dict[str, Any]:
        return {**self._chunk(0, {}), "choices": [], "usage": usage}

    def _chat_chunks(self, answer: dict[str, Any]) -> list[dict[str, Any]]:
        """From a stream transcript (``{"object": "stream"}``) or a whole chat answer."""
        out: list[dict[str, Any]] = []
        transcript = answer.get("object") == "stream"
        for choice in answer.get("choices") or []:
            index = choice.get("index", 0)
            message = choice if transcript else choice.get("message") or {}
            out.append(self._chunk(index, {"role": "assistant", "content": ""}))
            reasoning = message.get("reasoning_content")
            if isinstance(reasoning, str) and reasoning:
                out.append(self._chunk(index, {"reasoning_content": reasoning}))
            text = message.get("text" if transcript else "content")
            if isinstance(text, str) and text:
                out.append(self._chunk(index, {"content": text}))
            calls = message.get("tool_calls")
            if calls:
                shown = calls if transcript else [{"index": k, **c} for k, c in enumerate(calls)]
                out.append(self._chunk(index, {"tool_calls": copy.deepcopy(shown)}))
            out.append(self._chunk(index, {}, choice.get("finish_reason")))
        options = self._body.get("stream_options")
        wanted = isinstance(options, dict) and options.get("include_usage") is True
        if answer.get("usage") is not None and (transcript or wanted):
            out.append(self._usage(answer["usage"]))
        return out

    def _completion_chunks(self, answer: dict[str, Any]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for choice in answer.get("choices") or []:
            out.append({"id": "cmpl-" + self._basis, "object": "text_completion",
                        "created": self._created, "model": self._body.get("model"),
                        "choices": [{"index": choice.get("index", 0),
                                     "text": choice.get("text") or "", "logprobs": None,
                                     "finish_reason": choice.get("finish_reason")}]})
        if answer.get("usage") is not None:
            out.append({**out[-1], "choices": [], "usage": answer["usage"]} if out
                       else {"choices": [], "usage": answer["usage"]})
        return out

    def _message_chunks(self, message: dict[str, Any]) -> list[dict[str, Any]]:
        """Chat chunks that the Messages presenter turns back into ``message``."""
        out = [self._chunk(0, {"role": "assistant", "content": ""})]
        calls = 0
        for block in message.get("content") or []:
            kind = block.get("type")
            if kind == "thinking":
                out.append(self._chunk(0, {"reasoning_content": block.get("thinking") or ""}))
            elif kind == "text":
                out.append(self._chunk(0, {"content": block.get("text") or ""}))
            elif kind == "tool_use":
                given = block.get("input") or {}
                raw = given.get("_raw_arguments") if len(given) == 1 else None
                arguments = raw if isinstance(raw, str) else orjson.dumps(given).decode()
                out.append(self._chunk(0, {"tool_calls": [{
                    "index": calls, "id": block.get("id"), "type": "function",
                    "function": {"name": block.get("name") or "", "arguments": arguments}}]}))
                calls += 1
        reason = message.get("stop_reason")
        sequence = message.get("stop_sequence")
        finish = _FINISH.get(reason, "stop") if isinstance(reason, str) else "stop"
        out.append(self._chunk(0, {}, finish, matched_stop=sequence))
        usage = message.get("usage") or {}
        prompt = int(usage.get("input_tokens") or 0)
        completion = int(usage.get("output_tokens") or 0)
        out.append(self._usage({
            "prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": int(
                usage.get("cache_read_input_tokens") or 0)}}))
        return out
