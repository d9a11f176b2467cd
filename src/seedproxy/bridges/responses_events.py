"""Streamed chat chunks -> the Responses API's streaming events, as the openai SDK's
``responses.stream`` accumulates them: ``response.created``, ``response.in_progress``;
per output item ``output_item.added`` -> its deltas -> its done events ->
``output_item.done`` (the upstream's ``reasoning_content`` first, as a reasoning item; a
freeform call's whole input as one ``custom_tool_call_input.delta`` once the call is
complete); last ``response.completed`` carrying the whole response. ``sequence_number``
counts from 0, the ``error`` event of a failed stream included. ``to_response`` is what a
whole answer's events add up to. Ids derive from the upstream's own ids, never from a
clock or randomness.

``envelope`` holds every field the published schemas require (OpenAI's ``Response``,
Open Responses' ``ResponseResource``): settings the chat translation carries echo the
request (OpenAI's defaults where it left them out); the others show what was used
instead: nothing stored, nothing in the background, no truncation, no reasoning
configuration, no tool-call cap.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .chunk import ChunkWalker, whole_chunk
from .responses import chat_usage_to_responses, wants_logprobs
from .responses_tools import call_output_item, custom_input, plan_tools

__all__ = ["ResponsesEvents", "envelope", "to_response"]

_TOOL_CHOICES = ("none", "auto", "required")


def _number(value: Any, default: float) -> float | int:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    return default


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _tool(tool: Any) -> Any:
    """A function tool as the Response shows it: every field present."""
    if not isinstance(tool, dict) or tool.get("type") != "function":
        return tool  # namespace, custom and hosted tools: shown as the request gave them
    parameters, strict = tool.get("parameters"), tool.get("strict")
    return {"type": "function", "name": tool.get("name"),
            "description": _text_or_none(tool.get("description")),
            "parameters": parameters if isinstance(parameters, dict) else None,
            "strict": strict if isinstance(strict, bool) else None}


def _tool_choice(choice: Any) -> Any:
    if isinstance(choice, str) and choice in _TOOL_CHOICES:
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "name": choice.get("name")}
    return "auto"


def _text(body: dict[str, Any]) -> dict[str, Any]:
    """``text`` with its ``format`` whole (a JSON schema format names every field)."""
    given = _object(body.get("text"))
    fmt = _object(given.get("format"))
    out: dict[str, Any] = {"verbosity": given["verbosity"]} if "verbosity" in given else {}
    if fmt.get("type") == "json_schema":
        schema = fmt.get("schema")
        out["format"] = {"type": "json_schema", "name": str(fmt.get("name") or ""),
                         "description": _text_or_none(fmt.get("description")),
                         "schema": schema if isinstance(schema, dict) else None,
                         "strict": fmt.get("strict") is True}
    else:
        out["format"] = {"type": "json_object" if fmt.get("type") == "json_object" else "text"}
    return out


def envelope(
    body: dict[str, Any], response_id: str, created: Any, model: Any, *, status: str,
    output: list[dict[str, Any]], usage: dict[str, Any] | None, finish_reason: Any = None,
    completed_at: int | None = None,
) -> dict[str, Any]:
    """A Responses object echoing the request's settings, as OpenAI's server does.

    A ``completed`` answer cut by ``max_output_tokens`` shows ``incomplete``;
    ``completed_at`` is shown only on a ``completed`` one (never before ``created_at``).
    """
    incomplete = status == "completed" and finish_reason == "length"
    shown = "incomplete" if incomplete else status
    created_at = int(created) if isinstance(created, int | float) else 0
    top_logprobs = body.get("top_logprobs")
    max_output = body.get("max_output_tokens")
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "completed_at": (max(completed_at, created_at)
                         if shown == "completed" and completed_at is not None else None),
        "status": shown,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "instructions": body.get("instructions"),
        "max_output_tokens": max_output if isinstance(max_output, int) else None,
        "max_tool_calls": None,
        "model": model if isinstance(model, str) else str(body.get("model") or ""),
        "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls") is not False,
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "temperature": _number(body.get("temperature"), 1.0),
        "top_p": _number(body.get("top_p"), 1.0),
        "presence_penalty": _number(body.get("presence_penalty"), 0.0),
        "frequency_penalty": _number(body.get("frequency_penalty"), 0.0),
        "top_logprobs": (top_logprobs if isinstance(top_logprobs, int)
                         and not isinstance(top_logprobs, bool) else 0),
        "tool_choice": _tool_choice(body.get("tool_choice", "auto")),
        "tools": [_tool(t) for t in body.get("tools") or []],
        "text": _text(body),
        "truncation": "disabled",
        "store": False,
        "background": False,
        "service_tier": "default",
        "user": _text_or_none(body.get("user")),
        "safety_identifier": _text_or_none(body.get("safety_identifier")),
        "prompt_cache_key": _text_or_none(body.get("prompt_cache_key")),
        "metadata": body.get("metadata") or {},
        "usage": usage,
    }


def _logprob(entry: dict[str, Any]) -> dict[str, Any]:
    return {"token": entry.get("token", ""), "bytes": entry.get("bytes") or [],
            "logprob": entry.get("logprob", 0.0)}


def response_logprobs(choice: dict[str, Any]) -> list[dict[str, Any]]:
    """Chat ``logprobs.content`` entries in the Responses ``output_text.logprobs`` shape."""
    block = choice.get("logprobs")
    content = block.get("content") if isinstance(block, dict) else None
    return [{**_logprob(entry), "top_logprobs": [
                _logprob(t) for t in entry.get("top_logprobs") or [] if isinstance(t, dict)]}
            for entry in content or [] if isinstance(entry, dict)]


class ResponsesEvents(ChunkWalker):
    """Feed it each chat chunk the client would have seen; it returns the events to send."""

    def __init__(self, body: dict[str, Any], clock: Callable[[], float]) -> None:
        self._body = body
        self._clock = clock
        self._logprobs = wants_logprobs(body)
        self._seq = 0
        self._id: str | None = None
        self._created: Any = 0
        self._model: Any = None
        self._output: list[dict[str, Any]] = []
        self._text: dict[str, Any] | None = None  # the message item, once opened
        self._reasoning: dict[str, Any] | None = None  # the reasoning item, once opened
        self._plan = plan_tools(body.get("tools"))
        self._calls: dict[int, tuple[int, dict[str, Any]]] = {}  # chat tool index -> (output, item)
        self._raw: dict[str, str] = {}  # a freeform call's id -> its chat arguments so far
        self._usage: dict[str, Any] | None = None
        self._finish: Any = None
        self._final: dict[str, Any] | None = None

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self._seq, **fields}
        self._seq += 1
        return event

    def _part(self, kind: str, item: dict[str, Any], position: int,
              **fields: Any) -> dict[str, Any]:
        """An event on content part 0 of ``item``, at ``position`` in the output."""
        return self._event(kind, item_id=item["id"], output_index=position, content_index=0,
                           **fields)

    def _add(self, item: dict[str, Any], shown: dict[str, Any]) -> dict[str, Any]:
        """Append ``item`` to the output; its ``output_item.added`` event shows ``shown``."""
        self._output.append(item)
        return self._event("response.output_item.added", output_index=len(self._output) - 1,
                           item=shown)

    def _envelope(self, status: str, completed_at: int | None = None) -> dict[str, Any]:
        return envelope(self._body, self._id or "resp_0", self._created, self._model, status=status,
                        output=list(self._output) if status != "in_progress" else [],
                        usage=self._usage if status != "in_progress" else None,
                        finish_reason=self._finish, completed_at=completed_at)

    def feed(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if self._id is None:
            self._id = "resp_" + str(chunk.get("id") or "0")
            self._created = chunk.get("created", 0)
            self._model = chunk.get("model")
            events.append(self._event("response.created", response=self._envelope("in_progress")))
            events.append(
                self._event("response.in_progress", response=self._envelope("in_progress"))
            )
        if chunk.get("usage") is not None:
            self._usage = chat_usage_to_responses(chunk["usage"])
        return events + self._walk(chunk)

    def _on_finish(self, choice: dict[str, Any]) -> None:
        self._finish = choice["finish_reason"]

    def _on_reasoning(self, piece: str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if self._reasoning is None:  # the upstream's reasoning_content; no summary is made
            self._reasoning = {"id": f"rs_{self._id}", "type": "reasoning", "summary": [],
                               "content": [{"type": "reasoning_text", "text": ""}]}
            events.append(self._add(self._reasoning, dict(self._reasoning, content=[])))
        self._reasoning["content"][0]["text"] += piece
        events.append(self._part("response.reasoning_text.delta", self._reasoning,
                                 self._output.index(self._reasoning), delta=piece))
        return events

    def _on_text(self, piece: str, choice: dict[str, Any]) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if self._text is None:
            blank = {"type": "output_text", "text": "", "annotations": []}
            self._text = {"id": f"msg_{self._id}", "type": "message", "role": "assistant",
                          "status": "in_progress",
                          "content": [dict(blank, logprobs=[]) if self._logprobs else dict(blank)]}
            events.append(self._add(self._text, dict(self._text, content=[])))
            events.append(self._part("response.content_part.added", self._text,
                                     len(self._output) - 1, part=blank))
        part = self._text["content"][0]
        part["text"] += piece
        logprobs = response_logprobs(choice) if self._logprobs else []
        if self._logprobs:
            part["logprobs"].extend(logprobs)
        events.append(self._part("response.output_text.delta", self._text,
                                 self._output.index(self._text), delta=piece, logprobs=logprobs))
        return events

    def _on_call(self, call: dict[str, Any]) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        index = call.get("index", 0)
        function = call.get("function") or {}
        if index not in self._calls:
            call_id = call.get("id") or f"call_{self._id}_{index}"
            item = call_output_item(self._plan, call_id, function.get("name") or "", "",
                                    "in_progress")
            self._calls[index] = (len(self._output), item)
            events.append(self._add(item, dict(item)))
        position, item = self._calls[index]
        if function.get("name") and not item["name"]:  # named after it was opened
            named = call_output_item(self._plan, item["call_id"], function["name"],
                                     item.get("arguments", ""), "in_progress")
            item.clear()
            item.update(named)
        arguments = function.get("arguments")
        if not isinstance(arguments, str) or not arguments:
            return events
        if item["type"] == "custom_tool_call":  # its input is known once the call is whole
            self._raw[item["id"]] = self._raw.get(item["id"], "") + arguments
            return events
        item["arguments"] += arguments
        events.append(self._event("response.function_call_arguments.delta",
                                  item_id=item["id"], output_index=position, delta=arguments))
        return events

    def _close_call(self, position: int, item: dict[str, Any]) -> list[dict[str, Any]]:
        if item["type"] == "custom_tool_call":
            item["input"] = custom_input(self._raw.get(item["id"], ""))
            return [self._event("response.custom_tool_call_input.delta", item_id=item["id"],
                                output_index=position, delta=item["input"]),
                    self._event("response.custom_tool_call_input.done", item_id=item["id"],
                                output_index=position, input=item["input"])]
        item["status"] = "completed"
        return [self._event("response.function_call_arguments.done", item_id=item["id"],
                            output_index=position, name=item["name"],
                            arguments=item["arguments"])]

    def finish(self) -> list[dict[str, Any]]:
        """Close every open item and complete the response; call once, at the end."""
        events = self.feed({}) if self._id is None else []
        for position, item in enumerate(self._output):
            if item["type"] == "reasoning":
                events.append(self._part("response.reasoning_text.done", item, position,
                                         text=item["content"][0]["text"]))
            elif item["type"] == "message":
                item["status"] = "completed"
                part = item["content"][0]
                events.append(self._part("response.output_text.done", item, position,
                                         text=part["text"], logprobs=part.get("logprobs") or []))
                events.append(self._part("response.content_part.done", item, position, part=part))
            else:
                events.extend(self._close_call(position, item))
            events.append(
                self._event("response.output_item.done", output_index=position, item=item)
            )
        self._final = self._envelope("completed", int(self._clock()))
        events.append(self._event("response.completed", response=self._final))
        return events

    def error(self, error: dict[str, Any]) -> dict[str, Any]:
        """The ``error`` event that ends a failed stream, from the Responses error object
        (``error_presenters.RESPONSES``): its fields at the top (OpenAI's
        ``ResponseErrorEvent``) and whole under ``error`` (Open Responses'
        ``ErrorStreamingEvent``)."""
        return self._event("error", code=error["code"], message=error["message"],
                           param=error["param"], error=error)

    def result(self) -> dict[str, Any] | None:
        """The completed response once finished; before that, what arrived so far as an
        ``incomplete`` response (a stream that failed), or None when nothing did."""
        if self._final is not None or self._id is None:
            return self._final
        return self._envelope("incomplete")


def to_response(body: dict[str, Any], answer: dict[str, Any], completed_at: int) -> dict[str, Any]:
    """The Responses object for a (non-streaming) chat ``answer`` to ``to_chat(body)``,
    completed at the Unix time ``completed_at``."""
    choices = answer.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    events = ResponsesEvents(body, lambda: completed_at)
    events.feed(whole_chunk(answer, choice, choice.get("message") or {}))
    events.finish()
    response = events.result()
    assert response is not None
    return response
