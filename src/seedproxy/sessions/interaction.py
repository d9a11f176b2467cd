"""What one proxied request leaves behind for RL training.

Token ids and logprobs are held in ``array`` objects (4 bytes per id, 4 per logprob),
never lists of Python ints. ``to_dict`` writes the exported shape
(``trajectory.InteractionJSON``); ``to_storage``/``from_storage`` the stored one, the
same in every store (``codec.py`` packs its tokens).
"""

from __future__ import annotations

import base64
import binascii
import sys
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..trajectory import InteractionJSON
from .token_ids import TokenIds

__all__ = ["ChoiceRecord", "Interaction", "RoutedExperts", "VersionSpan", "version_spans"]

VersionSpan = tuple[str, int, int]
"""``(weight_version, start, end)``: output positions ``start..end-1`` came from that version."""


def version_spans(values: Any) -> list[VersionSpan]:
    """SGLang's ``weight_versions`` (``[{version, start, end}]``) as spans; anything
    else in the list is skipped, a non-list is no spans."""
    if not isinstance(values, list):
        return []
    spans: list[VersionSpan] = []
    for item in values:
        if not isinstance(item, dict):
            continue
        version, start, end = item.get("version"), item.get("start"), item.get("end")
        if isinstance(version, str) and type(start) is int and type(end) is int:
            spans.append((version, start, end))
    return spans


def _experts_out(choice: ChoiceRecord) -> dict[str, Any] | None:
    return choice.routed_experts.to_dict() if choice.routed_experts else None


def _ids(values: Any, typecode: str = "i") -> array[Any]:
    """Stored ids (or logprobs, ``f``) as an array (one ``codec.decode`` unpacked is
    taken as it is)."""
    return values if isinstance(values, array) else array(typecode, values or ())


@dataclass(slots=True)
class ChoiceRecord:
    """The sampled tokens of one choice; ``logprobs[i]`` belongs to ``token_ids[i]``."""

    token_ids: array[int] = field(default_factory=lambda: array("i"))
    logprobs: array[float] = field(default_factory=lambda: array("f"))
    finish_reason: str | None = None
    weight_version: str | None = None
    """The weight version the upstream reported when this choice finished."""
    weight_versions: list[VersionSpan] = field(default_factory=list)
    """Which version produced which output positions, where the upstream says."""
    routed_experts: RoutedExperts | None = None
    """MoE routing over prompt and completion, when captured."""

    @classmethod
    def of(cls, token_ids: Any, logprobs: Any, finish_reason: Any) -> ChoiceRecord:
        reason = finish_reason if isinstance(finish_reason, str) else None
        return cls(array("i", token_ids or ()), array("f", logprobs or ()), reason)

    def take_versions(self, source: Any) -> None:
        """Read ``weight_version`` / ``weight_versions`` from a ``meta_info`` or a
        chat answer's ``metadata``; a field of the wrong type is ignored."""
        if not isinstance(source, dict):
            return
        version = source.get("weight_version")
        if isinstance(version, str):
            self.weight_version = version
        spans = version_spans(source.get("weight_versions"))
        if spans:
            self.weight_versions = spans

    def storage(self, *, tokens: bool = True) -> dict[str, Any]:
        """The stored form; without ``tokens``, the counts of ``ids`` and ``logprobs``
        in their place (``codec.encode`` packs them)."""
        stored: dict[str, Any] = {
            "finish_reason": self.finish_reason,
            "weight_version": self.weight_version,
            "weight_versions": [list(span) for span in self.weight_versions],
            "routed_experts": _experts_out(self),
        }
        if tokens:
            stored.update(token_ids=self.token_ids.tolist(), logprobs=self.logprobs.tolist())
        else:
            stored.update(ids=len(self.token_ids), logprobs=len(self.logprobs))
        return stored

    @classmethod
    def from_storage(cls, data: dict[str, Any]) -> ChoiceRecord:
        return cls(
            _ids(data["token_ids"]),
            _ids(data["logprobs"], "f"),
            data["finish_reason"],
            data.get("weight_version"),
            [(str(v), int(a), int(b)) for v, a, b in data.get("weight_versions", ())],
            RoutedExperts.from_dict(data.get("routed_experts")),
        )


@dataclass(slots=True)
class Interaction:
    """One request/response pair in a session.

    ``interaction_id`` is unique within its session and stable across reruns
    (``i{index}``, or ``i{index}.{k}`` for the k-th extra request pinned to an index),
    so a replayed rollout exports byte-identical records. ``seeds`` holds one seed per
    choice, or is empty when no seed was derived (no-deterministic mode).
    ``abandoned`` marks an answer the client left before it was complete (recorded
    with what was generated, status 499), so exports can filter it out.
    """

    interaction_id: str
    request_index: int
    seeds: list[int]
    endpoint: str
    request: Any
    response: Any = None
    status: int = 200
    prompt_token_ids: array[int] = field(default_factory=lambda: array("i"))
    choices: list[ChoiceRecord] = field(default_factory=list)
    reward: float | None = None
    latency_ms: float = 0.0
    upstream: str | None = None
    abandoned: bool = False
    dispatch_weight_version: str | None = None
    """The weight version the proxy knew for ``upstream`` when it sent the request."""
    tito: dict[str, Any] | None = None
    """Token-in-token-out mode's matching keys and lineage (``extends``,
    ``forked_from``); None for a request the proxy did not render itself."""
    content_key: str | None = None
    """Content-keyed sessions only: the request's content key and its occurrence."""
    occurrence: int | None = None
    replayed: bool = False
    """Answered from a resumed (or forked) session's source record, with no upstream call."""
    compacted_from: str | None = None
    """The interaction whose history this request's summary replaces (a compaction)."""
    left_out_tools: list[str] | None = None
    """The types of the request's hosted tools the proxy left out of the prompt (a
    Responses request's ``web_search``...: ``responses_tools``); None when none were."""

    @property
    def token_count(self) -> int:
        return len(self.prompt_token_ids) + sum(len(c.token_ids) for c in self.choices)

    def prompt_ids(self) -> TokenIds:
        return TokenIds(self.prompt_token_ids)

    def per_choice(self, value: Callable[[ChoiceRecord], Any]) -> Any:
        """``value`` of the one choice (of an empty one when there is none), or with
        ``n > 1`` a list of one per choice, in choice order: the exported shape."""
        if len(self.choices) <= 1:
            return value(self.choices[0] if self.choices else ChoiceRecord())
        return [value(c) for c in self.choices]

    def to_dict(self) -> InteractionJSON:
        """Per-choice fields as ``per_choice`` gives them."""
        single = len(self.choices) <= 1
        shown: InteractionJSON = {
            "interaction_id": self.interaction_id,
            "request_index": self.request_index,
            "seed": (self.seeds[0] if self.seeds else None) if single else list(self.seeds),
            "endpoint": self.endpoint,
            "status": self.status,
            "request": self.request,
            "response": self.response,
            "prompt_token_ids": self.prompt_token_ids.tolist(),
            "completion_token_ids": self.per_choice(lambda c: c.token_ids.tolist()),
            "logprobs": self.per_choice(lambda c: c.logprobs.tolist()),
            "finish_reason": self.per_choice(lambda c: c.finish_reason),
            "reward": self.reward,
            "latency_ms": self.latency_ms,
            "upstream": self.upstream,
            "abandoned": self.abandoned,
            "dispatch_weight_version": self.dispatch_weight_version,
            "weight_version": self.per_choice(lambda c: c.weight_version),
            "weight_versions": self.per_choice(lambda c: [
                {"version": v, "start": a, "end": b} for v, a, b in c.weight_versions]),
            "routed_experts": self.per_choice(_experts_out),
        }
        if self.tito is not None:
            shown["lineage"] = {k: self.tito.get(k) for k in ("extends", "forked_from")}
            if "prompt" in self.tito:  # how the prompt was made (recorded since named matchers)
                shown["lineage"]["prompt"] = self.tito["prompt"]
            if self.tito.get("images"):  # a vision prompt's images, each by its sha256
                shown["images"] = self.tito["images"]
        if self.content_key is not None:
            shown["content_key"] = self.content_key
            shown["occurrence"] = self.occurrence
        if self.replayed:
            shown["replayed"] = True
        if self.compacted_from is not None:
            shown["compacted_from"] = self.compacted_from
        if self.left_out_tools:
            shown["left_out_tools"] = list(self.left_out_tools)
        return shown

    def to_storage(self, *, tokens: bool = True) -> dict[str, Any]:
        """Return a lossless, JSON-serialisable form (the rarely set ``replayed``,
        ``compacted_from`` and ``left_out_tools`` only when set); without ``tokens``, no
        ``prompt_token_ids`` and each choice's counts (``ChoiceRecord.storage``)."""
        stored = {name: getattr(self, name) for name in _STORED}
        stored["choices"] = [c.storage(tokens=tokens) for c in self.choices]  # in its place
        if self.replayed:
            stored["replayed"] = True
        if self.compacted_from is not None:
            stored["compacted_from"] = self.compacted_from
        if self.left_out_tools:
            stored["left_out_tools"] = self.left_out_tools
        if tokens:
            stored["prompt_token_ids"] = self.prompt_token_ids.tolist()
        return stored

    @classmethod
    def from_storage(cls, data: dict[str, Any]) -> Interaction:
        known = {k: v for k, v in data.items() if k in _FIELDS}
        known.update(seeds=list(data["seeds"]), request=data.get("request"),
                     prompt_token_ids=_ids(data.get("prompt_token_ids")),
                     choices=[ChoiceRecord.from_storage(c) for c in data.get("choices", ())])
        return cls(**known)


_FIELDS = frozenset(Interaction.__dataclass_fields__)
_STORED = ("interaction_id", "request_index", "seeds", "endpoint", "status", "request",
           "response", "choices", "reward", "latency_ms", "upstream", "abandoned",
           "dispatch_weight_version", "tito", "content_key", "occurrence")
"""What ``to_storage`` always writes, in order."""


_TYPECODES = {"uint8": "B", "uint16": "H", "int32": "i"}


@dataclass(frozen=True, slots=True)
class RoutedExperts:
    """MoE routed experts (R3), stored compactly for routing replay: expert ids,
    row-major, ``rows`` x ``cols``, as ``dtype`` (little-endian).

    SGLang returns ``meta_info.routed_experts`` as base64 of a little-endian int32 array,
    one row per position of the sequence so far but the last (``prompt + completion - 1``
    rows), ``num_layers * topk`` expert ids per row. The record keeps them in the
    narrowest unsigned type that holds the largest id (uint8 up to 255, uint16 up to
    65535, else int32): lossless, 4x smaller than the wire for current models.
    """

    dtype: str
    rows: int
    cols: int
    data: bytes

    @classmethod
    def from_wire(cls, value: Any, rows: int) -> RoutedExperts | None:
        """Repack SGLang's base64 int32 array; None when it is not one, or does not
        split into ``rows`` equal rows."""
        if not isinstance(value, str) or rows <= 0:
            return None
        try:
            raw = base64.b64decode(value, validate=True)
        except binascii.Error:
            return None
        if len(raw) % 4:
            return None
        ids = array("i")
        ids.frombytes(raw)
        if sys.byteorder == "big":
            ids.byteswap()
        if len(ids) % rows or (ids and min(ids) < 0):
            return None
        top = max(ids, default=0)
        dtype = "uint8" if top < 2**8 else "uint16" if top < 2**16 else "int32"
        packed = array(_TYPECODES[dtype], ids)
        if sys.byteorder == "big":
            packed.byteswap()
        return cls(dtype, rows, len(ids) // rows, packed.tobytes())

    def ids(self) -> list[int]:
        values = array(_TYPECODES[self.dtype])
        values.frombytes(self.data)
        if sys.byteorder == "big":
            values.byteswap()
        return values.tolist()

    def to_dict(self) -> dict[str, Any]:
        return {"dtype": self.dtype, "shape": [self.rows, self.cols],
                "data": base64.b64encode(self.data).decode("ascii")}

    @classmethod
    def from_dict(cls, data: Any) -> RoutedExperts | None:
        if not isinstance(data, dict):
            return None
        rows, cols = data["shape"]
        return cls(data["dtype"], rows, cols, base64.b64decode(data["data"]))
