"""The summary a session record keeps of its interactions: what ``GET /sessions``
lists (how many, and the last one's upstream and weight version), kept as each
interaction is recorded so that a page of sessions reads no interactions.

"Last" is by ``(request_index, interaction_id)``, the export order; ``order_key`` is
that order as one string (it sorts as bytes), the same in every store.
"""

from __future__ import annotations

from typing import Any

from .interaction import Interaction
from .record import SessionRecord

__all__ = ["apply_summary", "order_key", "summary_fields"]


def order_key(interaction: Interaction) -> str:
    """Sorts (as bytes) like ``(request_index, interaction_id)``."""
    return f"{interaction.request_index:020d}|{interaction.interaction_id}"


def summary_fields(interaction: Interaction) -> dict[str, Any]:
    """The listed fields of ``interaction``, as ``Interaction.to_dict`` shows them."""
    return {"upstream": interaction.upstream,
            "weight_version": interaction.per_choice(lambda c: c.weight_version)}


def apply_summary(record: SessionRecord, interaction: Interaction, *, new: bool) -> None:
    """Fold ``interaction`` (``new``: not a replacement of a recorded one) into the
    record's summary; a record from before summaries were kept stays unknown."""
    if record.interaction_count is None:
        return
    if new:
        record.interaction_count += 1
    key = order_key(interaction)
    if record.last_order is None or key >= record.last_order:
        fields = summary_fields(interaction)
        record.last_order = key
        record.last_upstream = fields["upstream"]
        record.last_weight_version = fields["weight_version"]
