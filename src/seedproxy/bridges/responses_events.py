"""Streamed chat chunks -> the Responses API's streaming events.

Emits what the openai SDK's ``client.responses.stream(...)`` accumulates:
``response.created``, ``response.in_progress``, per message ``output_item.added`` ->
``content_part.added`` -> ``output_text.delta``... -> ``output_text.done`` ->
``content_part.done`` -> ``output_item.done``, per function call ``output_item.added``
-> ``function_call_arguments.delta``... -> ``.done`` -> ``output_item.done`` (a call to a
freeform tool: ``output_item.added`` -> ``custom_tool_call_input.delta`` (the whole
input, once the call is complete) -> ``.done`` -> ``output_item.done``), and last
``response.completed`` carrying the whole response. The upstream's
``reasoning_content`` comes first, as a reasoning item: ``output_item.added`` ->
``reasoning_text.delta``... -> ``reasoning_text.done`` -> ``output_item.done``.
``sequence_number`` counts from 0, the ``error`` event of a failed stream included.
``to_response`` is the response the events of a whole answer add up to. Ids derive
from the upstream's own ids, never from a clock or randomness.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .chunk import ChunkWalker, whole_chunk
from .responses import chat_usage_to_responses, wants_logprobs
from .responses_envelope import envelope
from .responses_tools import call_output_item, custom_input, plan_tools

__all__ = ["ResponsesEvents", "to_response"]


def response_logprobs(choice: dict[str, Any]) -> list[dict[str, Any]]:
    """Chat ``logprobs.content`` entries in the Responses ``output_text.logprobs`` shape."""
    block = choice.get("logprobs")
    content = block.get("content") if isinstance(block, dict) else None
    out = []
    for entry in content or []:
        if isinstance(entry, dict):
            out.append({
                "token": entry.get("token", ""),
                "bytes": entry.get("bytes") or [],
                "logprob": entry.get("logprob", 0.0),
                "top_logprobs": [
                    {"token": t.get("token", ""), "bytes": t.get("bytes") or [],
                     "logprob": t.get("logprob", 0.0)}
                    for t in entry.get("top_logprobs") or [] if isinstance(t, dict)
                ],
            })
    return out


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
        self._text: dict[str, Any] | None = None  # the open message item
        self._text_index = -1
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
        if self._reasoning is None:
            # the upstream's reasoning_content; no summary is made
            self._reasoning = {"id": f"rs_{self._id}", "type": "reasoning", "summary": [],
                               "content": [{"type": "reasoning_text", "text": ""}]}
            self._output.append(self._reasoning)
            added = dict(self._reasoning, content=[])
            events.append(self._event("response.output_item.added",
                                      output_index=len(self._output) - 1, item=added))
        self._reasoning["content"][0]["text"] += piece
        events.append(self._event("response.reasoning_text.delta", item_id=self._reasoning["id"],
                                  output_index=self._output.index(self._reasoning),
                                  content_index=0, delta=piece))
        return events

    def _on_text(self, piece: str, choice: dict[str, Any]) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if self._text is None:
            self._text_index = len(self._output)
            part: dict[str, Any] = {"type": "output_text", "text": "", "annotations": []}
            if self._logprobs:
                part["logprobs"] = []
            self._text = {"id": f"msg_{self._id}", "type": "message", "role": "assistant",
                          "status": "in_progress", "content": [part]}
            self._output.append(self._text)
            events.append(self._event("response.output_item.added",
                                      output_index=self._text_index,
                                      item=dict(self._text, content=[])))
            events.append(self._event(
                "response.content_part.added", item_id=self._text["id"],
                output_index=self._text_index, content_index=0,
                part={"type": "output_text", "text": "", "annotations": []},
            ))
        part = self._text["content"][0]
        part["text"] += piece
        logprobs = response_logprobs(choice) if self._logprobs else []
        if self._logprobs:
            part["logprobs"].extend(logprobs)
        events.append(self._event("response.output_text.delta", item_id=self._text["id"],
                                  output_index=self._text_index, content_index=0,
                                  delta=piece, logprobs=logprobs))
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
            self._output.append(item)
            events.append(self._event("response.output_item.added",
                                      output_index=len(self._output) - 1, item=dict(item)))
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
        events: list[dict[str, Any]] = []
        if self._id is None:
            events.extend(self.feed({}))
        for position, item in enumerate(self._output):
            if item["type"] == "reasoning":
                events.append(self._event("response.reasoning_text.done", item_id=item["id"],
                                          output_index=position, content_index=0,
                                          text=item["content"][0]["text"]))
                events.append(
                    self._event("response.output_item.done", output_index=position, item=item)
                )
                continue
            if item["type"] == "message":
                item["status"] = "completed"
                part = item["content"][0]
                events.append(self._event("response.output_text.done", item_id=item["id"],
                                          output_index=position, content_index=0,
                                          text=part["text"], logprobs=part.get("logprobs") or []))
                events.append(self._event("response.content_part.done", item_id=item["id"],
                                          output_index=position, content_index=0, part=part))
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
        return envelope(self._body, self._id, self._created, self._model, status="incomplete",
                        output=list(self._output), usage=self._usage)


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
