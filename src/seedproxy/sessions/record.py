"""The persistent description of one physical session.

It keeps a summary of its interactions as each is recorded (what ``GET /sessions``
lists: how many, the last one's upstream and weight version), so a page of sessions
reads no interactions. "Last" is by ``(request_index, interaction_id)``, the export
order; ``order_key`` is that order as one string (sorting as bytes), in every store.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .interaction import Interaction

__all__ = ["Recorded", "SessionRecord", "Slot", "Stale", "apply_summary", "order_key",
           "summary_fields"]


@dataclass(slots=True)
class SessionRecord:
    """A physical session (``session_id``) replaying a logical rollout (``identity``).
    ``created_seq`` and ``ended_seq`` order sessions by creation and end; both come from
    store-wide counters, never clocks, so exports are ordered alike on every replica."""

    session_id: str
    identity: str
    api_key: str
    group_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    created_seq: int = 0
    created_at: float = 0.0
    last_active_at: float = 0.0
    next_index: int = 0
    ended: bool = False
    ended_seq: int | None = None
    end_status: str | None = None
    """How the session ended: ``"ended"`` (``POST /sessions/{id}/end``) or
    ``"abandoned"`` (idle past the abandon time while an export waited on it, see
    ``selection.py``); None while open."""
    reward: float | None = None
    exported: bool = False
    seed: int | None = None
    index_by: str = "arrival"
    """"arrival" (the contract's seed rule) or "content" (seeds keyed by what is asked)."""
    interaction_count: int | None = 0
    """How many interactions are recorded (kept by the store, see ``apply_summary``);
    None for a record stored before the count was kept."""
    last_order: str | None = None
    """``order_key`` of the last interaction (None: none yet)."""
    last_upstream: str | None = None
    last_weight_version: Any = None
    replays: dict[str, Any] | None = None
    """A resumed or forked session: ``{"session": source id, "at": K or None}``; its
    requests matching the source's record are answered from it (``pipeline/replaying.py``)."""
    store_epoch: str | None = None
    """The store's epoch at creation: a store started again from nothing (a new SQLite
    file, an emptied Redis, a restarted memory store) has a new one. Seeds never depend
    on it."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SessionRecord:
        """A stored record; one stored before summaries were kept has an unknown
        ``interaction_count`` (None), never a wrong 0."""
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        known.setdefault("interaction_count", None)
        if known.get("ended") and known.get("end_status") is None:
            known["end_status"] = "ended"  # ended before the status was kept
        return cls(**known)


@dataclass(frozen=True, slots=True)
class Slot:
    """A request's place in its session: its index, the interaction it writes and, in a
    content-keyed session, the occurrence of its content key (taken with the index)."""

    index: int
    interaction_id: str
    reused: bool = False
    occurrence: int | None = None


@dataclass(frozen=True, slots=True)
class Stale:
    """An allocation refused because the caller's view of the session lacks records:
    what ``SessionStore.changes`` would answer comes back instead of a slot (and no
    index is taken)."""

    seq: int
    blobs: list[bytes]


@dataclass(frozen=True, slots=True)
class Recorded:
    """What ``SessionStore.record`` stored: its record sequence number, its blob
    (``codec.encode``), and whether the caller's view (``after``) held every record
    stored before it (then the view takes this one without a read)."""

    seq: int
    blob: bytes
    current: bool


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
