"""``n > 1`` as n one-choice upstream requests, one per contract seed (SGLang copies
one seed to every choice, so its own ``n`` gives n identical samples).

Choice ``j`` is sent alone with ``seeds[j]``, concurrently, and merged: a sub-answer's
choice ``p`` (``p`` > 0 only for batched prompts) becomes choice ``p * n + j``, as
OpenAI numbers them; ``usage`` counts the prompt once and sums the completions.
Streams interleave as chunks arrive (parts whose chunks are all buffered take turns),
and one usage chunk ends the merged stream. ONE interaction is recorded, one
``ChoiceRecord`` per choice in index order. Each part is a ``PassthroughReader``; the
first failure of any part (an error event, a broken read, a bug) fails the whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from ...dialects import Captured, Endpoint, UpstreamRequest
from ...fleet.upstream import UpstreamReply
from . import Reader
from .passthrough import PassthroughReader, stamp

if TYPE_CHECKING:
    from ..call import UpstreamCall
    from ..context import RequestContext

__all__ = ["FanoutReader", "one_choice"]


def one_choice(endpoint: Endpoint, body: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``body`` that asks for one choice."""
    single = dict(body)
    if endpoint is Endpoint.GENERATE:
        params = dict(single.get("sampling_params") or {})
        params.pop("n", None)
        single["sampling_params"] = params
    else:
        single.pop("n", None)
    return single


class FanoutReader(Reader):
    def __init__(self, ctx: RequestContext, endpoint: Endpoint, body: dict[str, Any]) -> None:
        single = one_choice(endpoint, body)
        self.endpoint = endpoint
        self.body = body
        self.parts = [PassthroughReader(ctx, endpoint, single, seed, raw=False, stamped=False)
                      for seed in ctx.seeds]
        self._basis = ctx.basis

    def requests(self) -> list[UpstreamRequest]:
        return [request for part in self.parts for request in part.requests()]

    def opened(self, replies: list[UpstreamReply]) -> None:
        for part, reply in zip(self.parts, replies, strict=True):
            part.opened([reply])

    async def whole(self) -> tuple[Any, Captured]:
        wholes = [await part.whole() for part in self.parts]
        merged = merge_answers(self.endpoint, [answer for answer, _ in wholes])
        if self._basis is not None:
            stamp(self.endpoint, merged, self._basis, self.body)
        return merged, merge_captured([captured for _, captured in wholes])

    async def chunks(self, call: UpstreamCall) -> AsyncIterator[dict[str, Any] | bytes]:
        """Interleave the parts' chunks as they arrive, renumbered; usage last."""
        n = len(self.parts)
        generate = self.endpoint is Endpoint.GENERATE
        queue: asyncio.Queue[tuple[int, dict[str, Any] | bytes | BaseException | None]] = (
            asyncio.Queue())
        usages: list[Any] = [None] * n
        usage_chunk: dict[str, Any] | None = None

        async def pump(j: int, part: PassthroughReader) -> None:
            try:
                async for chunk in part.chunks(None):
                    await queue.put((j, chunk))
                    # Reading chunks already buffered never yields, so without this one
                    # part whose data is all here would be drained before the others:
                    # the parts take turns, a chunk each.
                    await asyncio.sleep(0)
            except Exception as exc:  # the merge raises it: one rule for every failure
                await queue.put((j, exc))
            finally:
                await queue.put((j, None))

        tasks = [asyncio.create_task(pump(j, part)) for j, part in enumerate(self.parts)]
        open_streams = n
        try:
            while open_streams:
                waited = time.perf_counter()
                j, item = await queue.get()
                call.waited(time.perf_counter() - waited)
                if item is None:
                    open_streams -= 1
                    continue
                if isinstance(item, BaseException):
                    raise item
                assert isinstance(item, dict)
                if generate:
                    item["index"] = _index(item) * n + j
                else:
                    if item.get("usage") is not None:
                        usages[j] = item.pop("usage")
                        if not item.get("choices"):
                            usage_chunk = item
                            continue
                    for choice in item.get("choices") or []:
                        if isinstance(choice, dict):
                            choice["index"] = _index(choice) * n + j
                if self._basis is not None:
                    stamp(self.endpoint, item, self._basis, self.body)
                yield item
            if usage_chunk is not None:
                usage_chunk["usage"] = sum_usage([u for u in usages if u is not None])
                if self._basis is not None:
                    stamp(self.endpoint, usage_chunk, self._basis, self.body)
                yield usage_chunk
        finally:  # the pumps are this loop's own; the replies are the call's
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    def captured(self) -> Captured:
        return merge_captured([part.captured() for part in self.parts])


def merge_answers(endpoint: Endpoint, answers: list[Any]) -> Any:
    """One answer from n one-choice answers, choices renumbered ``p * n + j``."""
    n = len(answers)
    if endpoint is Endpoint.GENERATE:
        items = []
        for j, answer in enumerate(answers):
            for p, item in enumerate(answer if isinstance(answer, list) else [answer]):
                if isinstance(item, dict):
                    item["index"] = p * n + j
                    items.append(item)
        return sorted(items, key=lambda item: item["index"])
    merged = dict(answers[0])
    choices = []
    for j, answer in enumerate(answers):
        for choice in answer.get("choices") or []:
            if isinstance(choice, dict):
                choice["index"] = _index(choice) * n + j
                choices.append(choice)
    merged["choices"] = sorted(choices, key=lambda c: c["index"])
    merged["usage"] = sum_usage([a.get("usage") for a in answers])
    return merged


def _index(choice: dict[str, Any]) -> int:
    index = choice.get("index", 0)
    return index if isinstance(index, int) else 0


def sum_usage(usages: list[Any]) -> Any:
    """The prompt counted once (every choice shares it), completion tokens summed."""
    if not usages or not all(isinstance(u, dict) for u in usages):
        return usages[0] if usages else None
    prompt = usages[0].get("prompt_tokens") or 0
    completions = [u.get("completion_tokens") or 0 for u in usages]
    if not all(type(c) is int for c in [prompt, *completions]):
        return usages[0]
    completion = sum(completions)
    return {**usages[0], "completion_tokens": completion, "total_tokens": prompt + completion}


def merge_captured(parts: list[Captured]) -> Captured:
    """Per-choice records in final index order (``p * n + j``)."""
    n = len(parts)
    prompt = next((c.prompt_token_ids for c in parts if c.prompt_token_ids), [])
    ranked = [
        (p * n + j, choice) for j, part in enumerate(parts) for p, choice in enumerate(part.choices)
    ]
    return Captured(prompt, [choice for _, choice in sorted(ranked, key=lambda r: r[0])])
