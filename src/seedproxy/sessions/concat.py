"""A multi-turn trajectory as one token sequence (export ``style: concat``).

Valid only where every turn's prompt ids start with the previous turn's prompt ids
plus completion ids: then the sequence is the first prompt, each completion (loss
mask 1, its logprobs) and each turn's new prompt tokens in between (mask 0, logprob
0.0). Where a turn breaks that (chat-template drift: the template re-rendered an
earlier turn differently, a frequent RL bug) the record says so, naming the turn
and the first differing position, and carries no sequence: nothing is guessed.

``weight_versions`` says which weight version sampled which positions of the
sequence (``[{version, start, end}]``, end exclusive, prompt tokens in no span;
``sequence_spans``): what an off-policy correction reads per token.
"""

from __future__ import annotations

from ..trajectory import ConcatJSON, WeightSpanJSON
from .interaction import ChoiceRecord, Interaction

__all__ = ["concat_record", "sequence_spans"]


def concat_record(interactions: list[Interaction]) -> ConcatJSON:
    """Failed requests (status >= 400) are left out: they produced no tokens. On a
    break, ``token_ids``, ``loss_mask`` and ``logprobs`` are None and ``concat_error``
    says where; ``logprobs`` is None as well when some turn came without them."""
    turns = [i for i in interactions if i.status < 400]
    tokens: list[int] = []
    mask: list[int] = []
    logprobs: list[float] = []
    versions: list[WeightSpanJSON] = []
    have_logprobs = True
    previous: list[int] | None = None
    for turn, interaction in enumerate(turns):
        prompt = interaction.prompt_token_ids.tolist()
        if len(interaction.choices) != 1:
            reason = f"{len(interaction.choices)} choices (concat needs one)"
            return _broken(turns, turn, reason, None)
        choice = interaction.choices[0]
        completion = choice.token_ids.tolist()
        if not prompt or not completion:
            return _broken(turns, turn, "no captured token ids", None)
        if previous is None:
            new = prompt
        else:
            position = next((n for n, token in enumerate(previous)
                             if n >= len(prompt) or prompt[n] != token), None)
            if position is not None:
                return _broken(turns, turn, "prompt does not extend the previous turn", position)
            new = prompt[len(previous):]
        versions += sequence_spans(choice, len(tokens) + len(new), len(completion))
        tokens += new + completion
        mask += [0] * len(new) + [1] * len(completion)
        if len(choice.logprobs) == len(completion):
            logprobs += [0.0] * len(new) + choice.logprobs.tolist()
        else:
            have_logprobs = False
        previous = prompt + completion
    return {
        "token_ids": tokens,
        "loss_mask": mask,
        "logprobs": logprobs if have_logprobs else None,
        "weight_versions": versions,
        "interaction_ids": [i.interaction_id for i in turns],
        "concat_error": None,
    }


def sequence_spans(choice: ChoiceRecord, offset: int, length: int) -> list[WeightSpanJSON]:
    """``choice``'s weight versions over sequence positions, its completion starting at
    ``offset``: its own spans shifted (clipped to its ``length`` tokens), else one span
    of the version it reported, else none."""
    if choice.weight_versions:
        return [{"version": v, "start": offset + a, "end": offset + min(b, length)}
                for v, a, b in choice.weight_versions if a < min(b, length)]
    if choice.weight_version is not None and length:
        return [{"version": choice.weight_version, "start": offset, "end": offset + length}]
    return []


def _broken(
    turns: list[Interaction], turn: int, reason: str, position: int | None
) -> ConcatJSON:
    at = turns[turn]
    return {
        "token_ids": None,
        "loss_mask": None,
        "logprobs": None,
        "weight_versions": None,
        "interaction_ids": [i.interaction_id for i in turns],
        "concat_error": {
            "turn": turn,
            "interaction_id": at.interaction_id,
            "request_index": at.request_index,
            "reason": reason,
            "position": position,
        },
    }
