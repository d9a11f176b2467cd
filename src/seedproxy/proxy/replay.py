"""Replay verification: re-send a session's recorded interactions to the fleet and
compare what comes back with what was recorded, token for token and logprob for logprob.

Invariants:
- Each recorded choice is re-sent alone, non-streamed, with its recorded seed, through
  the live pool, asking what the live request asked (translated as live traffic is,
  ``bridges.as_chat``); a token-in-token-out interaction as its recorded prompt ids
  to the mode's token route.
- Token ids compare exactly; logprobs compare as the stored float32 values, bit for bit.
- The report names the first divergence (turn, choice, position, expected and got); a
  session verifies only when every compared interaction matched.
- Interactions that were not a completed 200 answer are skipped and counted.
- At most one verification per upstream runs at a time; one more is ``OverCapacity``
  (429) before anything is read or sent.
"""

from __future__ import annotations

from array import array
from itertools import islice, zip_longest
from typing import Any

import orjson

from ..bridges import as_chat
from ..dialects import Backend, Endpoint
from ..errors import BadRequest, OverCapacity, UpstreamError
from ..fleet.pool import UpstreamPool
from ..fleet.upstream import UpstreamReply
from ..pipeline.readers.fanout import one_choice
from ..sessions import ChoiceRecord, Interaction, SessionStore
from ..sessions.media import prompt_image_data
from ..tito import TitoMode

__all__ = ["Verifier"]


class Verifier:
    def __init__(self, store: SessionStore, backend: Backend, pool: UpstreamPool,
                 tito: TitoMode | None = None) -> None:
        self.store = store
        self.backend = backend
        self.pool = pool
        self.tito = tito
        self._running = 0

    async def verify(self, session_id: str) -> dict[str, Any]:
        """``{session_id, ok, checked, skipped, first_divergence}``."""
        if self._running >= len(self.pool.upstreams):
            raise OverCapacity(f"{self._running} verifications are running (one per upstream "
                               "at a time); retry when one ends")
        self._running += 1  # no await since the check: the count never passes the limit
        try:
            checked = skipped = 0
            divergence = None
            for interaction in await self.store.interactions(session_id):
                if interaction.status != 200 or not interaction.choices:
                    skipped += 1
                    continue
                divergence = await self._check(session_id, interaction)
                checked += 1
                if divergence is not None:
                    break
        finally:
            self._running -= 1
        return {"session_id": session_id, "ok": divergence is None, "checked": checked,
                "skipped": skipped, "first_divergence": divergence}

    async def _check(self, session_id: str, interaction: Interaction) -> dict[str, Any] | None:
        endpoint = Endpoint(interaction.endpoint)
        rendered = interaction.tito is not None
        body = dict(interaction.request)
        chat = as_chat(endpoint, body, tito=rendered,
                       seeds_responses=self.backend.seeds_responses)
        if chat is not None:
            endpoint, body = Endpoint.CHAT, chat
        body.pop("stream", None)
        body.pop("stream_options", None)
        seeds: list[int | None] = list(interaction.seeds) or [None]
        for choice, expected in enumerate(interaction.choices):
            seed = seeds[choice] if choice < len(seeds) else None
            if rendered:
                got = await self._regenerate(session_id, body, interaction, seed)
            else:
                single = one_choice(endpoint, body) if len(interaction.choices) > 1 else dict(body)
                got = await self._resend(session_id, endpoint, single, seed)
            divergence = _first_divergence(expected, got)
            if divergence is not None:
                return {"interaction_id": interaction.interaction_id,
                        "request_index": interaction.request_index, "choice": choice,
                        **divergence}
        return None

    async def _resend(
        self, session_id: str, endpoint: Endpoint, body: dict[str, Any], seed: int | None
    ) -> ChoiceRecord:
        request = self.backend.prepare(endpoint, body, seed, capture=True)
        upstream, parsed = await _answer(
            await self.pool.send(request, key=session_id, stream=False))
        _, captured = self.backend.finish(endpoint, body, parsed)
        if not captured.choices:
            raise UpstreamError(f"verify: upstream {upstream} answered no choice")
        return captured.choices[0]

    async def _regenerate(self, session_id: str, chat: dict[str, Any],
                          interaction: Interaction, seed: int | None) -> ChoiceRecord:
        mode = self.tito
        if mode is None:
            raise BadRequest("this session was recorded in token-in-token-out mode: verify "
                             "it through a proxy in that mode (--token-in-token-out)")
        model = chat.get("model") or mode.model_name
        request = mode.dialect.request(interaction.prompt_ids(), mode.sampling(chat), seed,
                                       False, model, prompt_image_data(interaction))
        _, parsed = await _answer(await self.pool.send(request, key=session_id, stream=False))
        sample = mode.dialect.read(parsed)
        return ChoiceRecord.of(sample.token_ids, sample.logprobs, sample.finish)


async def _answer(reply: UpstreamReply) -> tuple[str, Any]:
    """The upstream's name and its whole 200 answer, parsed; the reply is closed."""
    try:
        status = reply.response.status_code
        content = reply.response.content
    finally:
        await reply.aclose()
    if status != 200:
        raise UpstreamError(f"verify: upstream {reply.upstream} answered {status}")
    try:
        return reply.upstream, orjson.loads(content)
    except orjson.JSONDecodeError:
        raise UpstreamError(f"verify: upstream {reply.upstream} sent no JSON") from None


def _first_divergence(expected: ChoiceRecord, got: ChoiceRecord) -> dict[str, Any] | None:
    want, have = expected.token_ids, got.token_ids
    columns = zip_longest(want, have, expected.logprobs, array("f", got.logprobs))
    for position, (token_want, token_have, lp_want, lp_have) in islice(
            enumerate(columns), max(len(want), len(have))):
        if token_want != token_have or lp_want != lp_have:
            return {"position": position,
                    "expected": {"token_id": token_want, "logprob": lp_want},
                    "got": {"token_id": token_have, "logprob": lp_have}}
    return None
