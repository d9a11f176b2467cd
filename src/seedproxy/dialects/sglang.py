"""SGLang: seeds as ``seed`` on OpenAI routes and ``sampling_params.sampling_seed`` on
``/generate``; token ids from ``return_*token_ids``, ``x-sglext-*`` headers and
``meta_info``. SGLang's /v1/responses drops ``seed``, so Responses is translated."""

from __future__ import annotations

from typing import Any, ClassVar

from ..sessions import ChoiceRecord
from ..sessions.interaction import RoutedExperts
from ..sessions.token_ids import TokenIds
from ..tito.dialect import GenerateDialect
from ..wire.shapes import chat_logprobs, completion_logprobs, floats, ints, wants
from ..wire.types import Captured, Endpoint, UpstreamRequest
from .kind import Backend
from .tracked import Tracker

__all__ = ["SGLangBackend"]

_GENERATE_LOGPROB_KEYS = ("output_token_logprobs", "input_token_logprobs", "output_top_logprobs",
                          "input_top_logprobs", "output_token_ids_logprobs",
                          "input_token_ids_logprobs")
_SGLEXT_IDS = {"x-sglext-return-input-ids": "1", "x-sglext-return-output-ids": "1"}


class SGLangBackend(Backend):
    name: ClassVar[str] = "sglang"
    echoes_prompt: ClassVar[bool] = True
    reports_server_info: ClassVar[bool] = True
    names_requests: ClassVar[bool] = True
    token_dialect = GenerateDialect

    def prepare(
        self, endpoint: Endpoint, body: dict[str, Any], seed: int | None, *, capture: bool
    ) -> UpstreamRequest:
        headers = dict(self._auth)
        stream = body.get("stream") is True
        if endpoint is Endpoint.GENERATE:
            params = dict(body.get("sampling_params") or {})
            if seed is not None:
                params["sampling_seed"] = seed
            body["sampling_params"] = params
            if capture:
                body["return_logprob"] = True
                if self.routed_experts:
                    body["return_routed_experts"] = True
        else:
            if seed is not None:
                body["seed"] = seed
            if capture and endpoint is Endpoint.CHAT:
                if not body.get("logprobs"):  # also over an explicit false; stripped again
                    body["logprobs"] = True
                if stream:
                    headers.update(_SGLEXT_IDS)
                else:
                    body["return_prompt_token_ids"] = True
                    body["return_token_ids"] = True
            elif capture and endpoint is Endpoint.COMPLETIONS:
                if body.get("logprobs") is None:
                    body["logprobs"] = 1
                body["return_token_ids"] = True
        return UpstreamRequest(endpoint.value, body, headers)

    def finish(
        self, endpoint: Endpoint, client_body: dict[str, Any], answer: Any
    ) -> tuple[Any, Captured]:
        if endpoint is Endpoint.GENERATE:
            return _finish_generate(client_body, answer)
        if not isinstance(answer, dict) or not isinstance(answer.get("choices"), list):
            return answer, Captured()
        keep_ids = wants(client_body, "return_token_ids")
        keep_prompt = keep_ids or wants(client_body, "return_prompt_token_ids")
        chat = endpoint is Endpoint.CHAT
        keep_logprobs = (wants(client_body, "logprobs") if chat
                         else client_body.get("logprobs") is not None)
        captured = Captured()
        for choice in answer.get("choices") or []:
            if not isinstance(choice, dict):
                continue
            prompt = choice.get("prompt_token_ids")
            if isinstance(prompt, TokenIds):  # read past the known part (echo.py)
                if not captured.prompt_token_ids:
                    captured.prompt_token_ids = prompt.ids
                if keep_prompt:
                    choice["prompt_token_ids"] = prompt.tolist()
            elif prompt and not captured.prompt_token_ids:
                captured.prompt_token_ids = ints(prompt)
            ids_key = "response_token_ids" if "response_token_ids" in choice else "token_ids"
            logprobs = chat_logprobs(choice) if chat else completion_logprobs(choice)
            record = ChoiceRecord.of(ints(choice.get(ids_key)), logprobs,
                                     choice.get("finish_reason"))
            record.take_versions(answer.get("metadata"))
            captured.choices.append(record)
            if not keep_prompt:
                choice.pop("prompt_token_ids", None)
            if not keep_ids:
                choice.pop(ids_key, None)
            if not keep_logprobs:
                choice["logprobs"] = None
        return answer, captured

    def stream_capture(self, endpoint: Endpoint, client_body: dict[str, Any]) -> Any:
        if endpoint is Endpoint.GENERATE:
            return _GenerateStream(client_body)
        return _OpenAIStream(endpoint, client_body)


def _finish_generate(client_body: dict[str, Any], answer: Any) -> tuple[Any, Captured]:
    items = answer if isinstance(answer, list) else [answer]
    captured = Captured(prompt_token_ids=ints(client_body.get("input_ids")))
    unasked = _unasked(client_body)
    for item in items:
        if isinstance(item, dict):
            captured.choices.append(_generate_choice(item))
            _strip(item, unasked)
    return answer, captured


def _generate_choice(item: dict[str, Any]) -> ChoiceRecord:
    meta = item.get("meta_info")
    meta = meta if isinstance(meta, dict) else {}
    entries = meta.get("output_token_logprobs")
    logprobs = floats([e[0] for e in entries if isinstance(e, list) and e and e[0] is not None]
                      if isinstance(entries, list) else [])
    finish = meta.get("finish_reason")
    reason = finish.get("type") if isinstance(finish, dict) else finish
    record = ChoiceRecord.of(ints(item.get("output_ids")), logprobs, reason)
    record.take_versions(meta)
    if "routed_experts" in meta:
        prompt, completion = meta.get("prompt_tokens"), meta.get("completion_tokens")
        if type(prompt) is int and type(completion) is int:
            rows = prompt + completion - 1
            record.routed_experts = RoutedExperts.from_wire(meta["routed_experts"], rows)
    return record


def _unasked(client_body: dict[str, Any]) -> tuple[str, ...]:
    """The ``meta_info`` keys the proxy asked for itself and the client did not."""
    keys = () if client_body.get("return_logprob") is True else _GENERATE_LOGPROB_KEYS
    return keys + (() if client_body.get("return_routed_experts") is True
                   else ("routed_experts",))


def _strip(item: dict[str, Any], keys: tuple[str, ...]) -> None:
    meta = item.get("meta_info")
    if isinstance(meta, dict):
        for key in keys:
            meta.pop(key, None)


class _GenerateStream:
    """/generate chunks are cumulative: the last chunk of each index holds everything."""

    def __init__(self, client_body: dict[str, Any]) -> None:
        self._unasked = _unasked(client_body)
        self._prompt = ints(client_body.get("input_ids"))
        self._last: dict[int, ChoiceRecord] = {}

    def feed(self, event: dict[str, Any]) -> dict[str, Any] | None:
        index = event.get("index", 0)
        self._last[index if isinstance(index, int) else 0] = _generate_choice(event)
        _strip(event, self._unasked)
        return event

    def result(self) -> Captured:
        return Captured(self._prompt, [self._last[i] for i in sorted(self._last)])


class _OpenAIStream(Tracker):
    """Chat and completion chunks: ids arrive per delta (completions) or in a final
    ``sglext`` chunk (chat); logprobs per delta."""

    def __init__(self, endpoint: Endpoint, client_body: dict[str, Any]) -> None:
        super().__init__(endpoint, client_body, ids=endpoint is not Endpoint.CHAT,
                         spelled=False)
        self._metadata: Any = None

    def feed(self, event: dict[str, Any]) -> dict[str, Any] | None:
        if "metadata" in event:
            self._metadata = event["metadata"]
        sglext = event.get("sglext")
        if isinstance(sglext, dict):
            self._take_sglext(sglext)
            if not sglext:
                del event["sglext"]
                if not event.get("choices") and event.get("usage") is None:
                    return None
        return super().feed(event)

    def _take_sglext(self, sglext: dict[str, Any]) -> None:
        if "input_ids" in sglext:
            self._prompt = ints(sglext.pop("input_ids"))
        outputs = sglext.pop("output_ids", None)
        if isinstance(outputs, list):
            for index, ids in enumerate(outputs):
                self._choices.setdefault(index, ChoiceRecord()).token_ids.extend(ints(ids))

    def result(self) -> Captured:
        captured = super().result()
        for record in captured.choices:
            record.take_versions(self._metadata)
        return captured
