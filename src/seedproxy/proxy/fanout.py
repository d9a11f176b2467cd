"""``n > 1`` as n one-choice upstream requests, one per contract seed.

SGLang copies one seed to every choice, so its own ``n`` gives n identical samples.
The proxy instead sends choice ``j`` alone with ``seeds[j]``, concurrently, and
merges: a sub-answer's choice ``p`` (``p`` > 0 only for batched prompts) becomes
choice ``p * n + j``, as OpenAI numbers them; ``usage`` counts the prompt once and
sums the completions. Streams interleave as chunks arrive, each with its final
``index``; one usage chunk and one ``[DONE]`` end the merged stream. The request
records ONE interaction with one ``ChoiceRecord`` per choice, in index order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import httpx
import orjson
from starlette.responses import Response

from ..backends import Captured, Endpoint, UpstreamRequest
from ..backends.answer_shape import MalformedAnswer, check_chunk
from ..backends.pool import UpstreamReply
from ..errors import UpstreamError
from .relay import RelayResponse
from .sse import DONE, encode_event, event_json, split_events
from .stream import StreamRecord
from .transcript import StreamTranscript

if TYPE_CHECKING:
    from .forward import Forwarder, Plan

__all__ = ["exchange_fanout", "send_choices", "merge_answers", "merge_captured", "one_choice", "sum_usage"]

log = logging.getLogger("seedproxy.request")


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


async def send_choices(
    fwd: Forwarder, plan: Plan, requests: list[UpstreamRequest]
) -> list[UpstreamReply] | Response:
    """Send one upstream request per choice, together, and fill in the plan from the
    replies. Returns them when every one answered below 400; else an upstream that
    never answered is recorded and raised, and the first error answer is recorded and
    returned as the client's response (the other replies are closed by the plan)."""
    results = await asyncio.gather(*(fwd.send(plan, r) for r in requests),
                                   return_exceptions=True)
    replies = [r for r in results if isinstance(r, UpstreamReply)]
    plan.upstream = ",".join(dict.fromkeys(r.upstream for r in replies)) or None
    versions = {r.dispatch_weight_version for r in replies}
    plan.dispatch_weight_version = versions.pop() if len(versions) == 1 else None
    plan.upstream_s = max((r.waited_s for r in replies), default=time.perf_counter() - plan.arrived)
    failovers = sum(r.failovers for r in replies)
    if failovers:
        fwd.metrics.failovers.inc(failovers)
    failure = next((r for r in results if isinstance(r, BaseException)), None)
    if isinstance(failure, UpstreamError):
        await fwd.record(plan, failure.status_code, failure.body(), Captured())
    if failure is not None:
        raise failure
    bad = next((r for r in replies if r.response.status_code >= 400), None)
    if bad is not None:
        return await fwd.upstream_error(plan, bad)
    return replies


async def exchange_fanout(fwd: Forwarder, plan: Plan) -> Response:
    """Answer an ``n``-choice request with ``len(plan.seeds)`` upstream requests."""
    client = plan.client
    requests = [
        fwd.backend.prepare(client.endpoint, one_choice(client.endpoint, client.body), seed,
                            capture=plan.capture)
        for seed in plan.seeds
    ]

    replies = await send_choices(fwd, plan, requests)
    if isinstance(replies, Response):
        return replies
    headers = plan.headers()
    if client.stream:
        headers["x-seedproxy-overhead-ms"] = f"{plan.overhead_ms():.3f}"
        headers["cache-control"] = "no-cache"
        return _merged_response(fwd, plan, replies, headers)
    answers: list[Any] = []
    parts: list[Captured] = []
    for reply in replies:
        answer = await fwd.checked_answer(plan, reply, client.endpoint)
        captured = Captured()
        if plan.capture:
            answer, captured = fwd.backend.finish(client.endpoint, client.body, answer)
        answers.append(answer)
        parts.append(captured)
    merged = merge_answers(client.endpoint, answers)
    await fwd.record(plan, 200, merged, merge_captured(parts))
    headers["x-seedproxy-overhead-ms"] = f"{plan.overhead_ms():.3f}"
    fwd.observe(plan, 200)
    return Response(orjson.dumps(merged), headers=headers, media_type="application/json")


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
    counts = [u.get("completion_tokens") or 0 for u in usages] + [usages[0].get("prompt_tokens") or 0]
    if not all(type(c) is int for c in counts):
        return usages[0]
    total = dict(usages[0])
    completion = sum(counts[:-1])
    total["completion_tokens"] = completion
    total["total_tokens"] = counts[-1] + completion
    return total


def merge_captured(parts: list[Captured]) -> Captured:
    """Per-choice records in final index order (``p * n + j``)."""
    n = len(parts)
    prompt = next((c.prompt_token_ids for c in parts if c.prompt_token_ids), [])
    ranked = [
        (p * n + j, choice) for j, part in enumerate(parts) for p, choice in enumerate(part.choices)
    ]
    return Captured(prompt, [choice for _, choice in sorted(ranked, key=lambda r: r[0])])


def _merged_response(
    fwd: Forwarder, plan: Plan, replies: list[UpstreamReply], headers: dict[str, str]
) -> Response:
    client = plan.client
    trackers = [
        fwd.backend.stream_capture(client.endpoint, client.body) if plan.capture else None
        for _ in replies
    ]
    transcript = StreamTranscript(client.endpoint)

    def snapshot() -> tuple[Any, Captured]:
        parts = [t.result() if t is not None else Captured() for t in trackers]
        return transcript.result(), merge_captured(parts)

    record = StreamRecord(fwd, plan, snapshot)
    return RelayResponse(
        _merged(fwd, plan, replies, record, trackers, transcript),
        record,
        status_code=200,
        headers=headers,
        media_type="text/event-stream",
    )


async def _merged(
    fwd: Forwarder,
    plan: Plan,
    replies: list[UpstreamReply],
    record: StreamRecord,
    trackers: list[Any],
    transcript: StreamTranscript,
) -> AsyncIterator[bytes]:
    """Interleave n upstream streams as their events arrive; record before [DONE]."""
    client = plan.client
    n = len(replies)
    generate = client.endpoint is Endpoint.GENERATE
    queue: asyncio.Queue[tuple[int, bytes | Exception | None]] = asyncio.Queue()
    usages: list[Any] = [None] * n
    usage_chunk: dict[str, Any] | None = None

    async def pump(j: int, reply: UpstreamReply) -> None:
        try:
            async for event in split_events(
                reply.response.aiter_raw(), fwd.settings.max_upstream_body_bytes
            ):
                await queue.put((j, event))
        except httpx.HTTPError as exc:
            await queue.put((j, exc))
        finally:
            await queue.put((j, None))

    tasks = [asyncio.create_task(pump(j, r)) for j, r in enumerate(replies)]
    open_streams = n
    try:
        while open_streams:
            waited = time.perf_counter()
            j, item = await queue.get()
            plan.upstream_s += time.perf_counter() - waited
            if item is None:
                open_streams -= 1
                continue
            if isinstance(item, Exception):
                record.status = 502
                log.warning("upstream broke off a stream: %s", type(item).__name__)
                yield encode_event(UpstreamError("an upstream broke off the stream").body())
                return
            payload = event_json(item)
            if payload is None:
                continue  # [DONE] and comments: one [DONE] ends the merged stream
            try:
                check_chunk(client.endpoint, payload)
            except MalformedAnswer as exc:
                record.status = exc.status_code
                log.warning("an upstream sent a malformed chunk: %s", exc.message)
                yield encode_event(exc.body())
                return
            tracker = trackers[j]
            shown = tracker.feed(payload) if tracker is not None else payload
            if shown is None:
                continue
            if generate:
                shown["index"] = _index(shown) * n + j
            else:
                if shown.get("usage") is not None:
                    usages[j] = shown.pop("usage")
                    if not shown.get("choices"):
                        usage_chunk = shown
                        continue
                for choice in shown.get("choices") or []:
                    if isinstance(choice, dict):
                        choice["index"] = _index(choice) * n + j
            transcript.add(shown)
            yield encode_event(shown)
        if usage_chunk is not None:
            usage_chunk["usage"] = sum_usage([u for u in usages if u is not None])
            transcript.add(usage_chunk)
            yield encode_event(usage_chunk)
        unrecorded = await record.seal()
        if unrecorded is not None:
            yield encode_event(unrecorded.body())
            return
        yield DONE
    finally:  # the pumps are this generator's own; the replies are the record's
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, httpx.HTTPError):
                await task
