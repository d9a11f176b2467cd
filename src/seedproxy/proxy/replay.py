"""Replay verification: re-send a session's recorded interactions to the fleet and
compare what comes back with what was recorded, token for token and logprob for logprob.

Invariants:
- Each recorded choice is re-sent alone, non-streamed, with its recorded seed, through
  the same dialect and pool as live traffic (so any server of the fleet may answer).
- Token ids compare exactly; logprobs compare as the stored float32 values, bit for bit.
- The report names the first divergence (turn, choice, position, expected and got); a
  session verifies only when every compared interaction matched.
- Interactions that were not a completed 200 answer are skipped and counted.
"""

from __future__ import annotations

from array import array
from typing import Any

import orjson

from ..backends import Backend, Endpoint
from ..backends.pool import UpstreamPool
from ..backends.responses_bridge import to_chat
from ..errors import UpstreamError
from ..pipeline.readers.fanout import one_choice
from ..sessions import ChoiceRecord, Interaction, SessionStore

__all__ = ["Verifier"]


class Verifier:
    def __init__(self, store: SessionStore, backend: Backend, pool: UpstreamPool) -> None:
        self.store = store
        self.backend = backend
        self.pool = pool

    async def verify(self, session_id: str) -> dict[str, Any]:
        """Return ``{session_id, ok, checked, skipped, first_divergence}``."""
        checked = skipped = 0
        for interaction in await self.store.interactions(session_id):
            if interaction.status != 200 or not interaction.choices:
                skipped += 1
                continue
            divergence = await self._check(session_id, interaction)
            checked += 1
            if divergence is not None:
                return _report(session_id, checked, skipped, divergence)
        return _report(session_id, checked, skipped, None)

    async def _check(self, session_id: str, interaction: Interaction) -> dict[str, Any] | None:
        endpoint = Endpoint(interaction.endpoint)
        body = dict(interaction.request)
        if endpoint is Endpoint.RESPONSES:
            endpoint, body = Endpoint.CHAT, to_chat(body)
        body.pop("stream", None)
        body.pop("stream_options", None)
        seeds: list[int | None] = list(interaction.seeds) or [None]
        for choice, expected in enumerate(interaction.choices):
            seed = seeds[choice] if choice < len(seeds) else None
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
        reply = await self.pool.send(request, key=session_id, stream=False)
        try:
            status = reply.response.status_code
            content = reply.response.content
        finally:
            await reply.aclose()
        if status != 200:
            raise UpstreamError(f"verify: upstream {reply.upstream} answered {status}")
        try:
            answer = orjson.loads(content)
        except orjson.JSONDecodeError:
            raise UpstreamError(f"verify: upstream {reply.upstream} sent no JSON") from None
        _, captured = self.backend.finish(endpoint, body, answer)
        if not captured.choices:
            raise UpstreamError(f"verify: upstream {reply.upstream} answered no choice")
        return captured.choices[0]


def _first_divergence(expected: ChoiceRecord, got: ChoiceRecord) -> dict[str, Any] | None:
    want, have = expected.token_ids, got.token_ids
    want_lp, have_lp = expected.logprobs, array("f", got.logprobs)
    for position in range(max(len(want), len(have))):
        token_want = want[position] if position < len(want) else None
        token_have = have[position] if position < len(have) else None
        lp_want = want_lp[position] if position < len(want_lp) else None
        lp_have = have_lp[position] if position < len(have_lp) else None
        if token_want != token_have or lp_want != lp_have:
            return {"position": position,
                    "expected": {"token_id": token_want, "logprob": lp_want},
                    "got": {"token_id": token_have, "logprob": lp_have}}
    return None


def _report(session_id: str, checked: int, skipped: int,
            divergence: dict[str, Any] | None) -> dict[str, Any]:
    return {"session_id": session_id, "ok": divergence is None, "checked": checked,
            "skipped": skipped, "first_divergence": divergence}
