"""The stored form of an interaction: each rollout's tokens and messages stored once.

An interaction that extends an earlier one (its ``link``) stores its prompt as that
interaction's prompt + one choice's completion (a reference) plus the ids it adds, its
request's message list as that interaction's first messages plus the ones it adds, and
its token-in-token-out keys and a vision prompt's image records likewise (the images
themselves live in the messages: a screenshot is stored once a session). Token ids and
logprobs are packed little-endian 4-byte arrays after a JSON header, never JSON lists.
``resolve`` rebuilds the whole interactions on read, equal field for field to what was
recorded. A blob that starts with ``{`` is the older whole-JSON form
(``Interaction.to_storage``), still read.
"""

from __future__ import annotations

import hashlib
import struct
import sys
from array import array
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from ..errors import StoreError
from .interaction import Interaction

__all__ = ["MESSAGE_FIELDS", "Link", "Sent", "Signed", "Stored", "conversation", "decode",
           "encode", "linked_images", "own_images", "resolve", "sent_of", "sign",
           "with_reward"]

_MAGIC = b"\x00SP2"
_HEAD = struct.Struct("<4sI")
_SWAP = sys.byteorder != "little"

MESSAGE_FIELDS = ("messages", "input")
"""Request fields holding a conversation that grows turn by turn."""


@dataclass(frozen=True, slots=True)
class Link:
    """What an interaction extends: the first ``prompt`` ids of ``interaction_id``'s
    prompt + choice ``choice``'s completion (-1: its prompt alone), its first
    ``messages`` request messages (of field ``field``) and its first ``keys``
    token-in-token-out message keys (0: none taken)."""

    interaction_id: str
    choice: int
    prompt: int
    messages: int
    keys: int
    field: str = "messages"

    def storage(self) -> list[Any]:
        return [self.interaction_id, self.choice, self.prompt, self.messages, self.keys,
                self.field]


@dataclass(frozen=True, slots=True)
class Sent:
    """An interaction's request messages as serialised: how many, the serialised
    length without the closing ``]``, and that prefix's digest. A later request whose
    serialisation starts with the same bytes repeats those messages exactly."""

    field: str
    count: int
    size: int
    digest: str


@dataclass(frozen=True, slots=True)
class Signed:
    """A request's ``sent_of`` against one recorded turn, computed once where its body
    is read and reused where it is recorded: ``base`` is that turn's interaction id
    and ``base_sent`` its ``Sent`` (both None without one); ``repeated`` is whether the
    request's messages start with the base's, byte for byte."""

    sent: Sent
    base: str | None
    base_sent: Sent | None
    repeated: bool

    def against(self, base: str | None, base_sent: Sent | None) -> tuple[Sent, bool] | None:
        """``sent_of`` against that base, when it is the one signed against; else None."""
        if base != self.base or base_sent != self.base_sent:
            return None
        return self.sent, self.repeated


def sign(request: Any, base: str | None, base_sent: Sent | None) -> Signed | None:
    """``sent_of(request, base_sent)`` kept with its base; None as ``sent_of`` gives."""
    found = sent_of(request, base_sent)
    if found is None:
        return None
    return Signed(found[0], base, base_sent, found[1])


def _hex(digest: Any) -> str:
    """A ``Sent`` digest: SHA-256 cut to 16 bytes. Only compared with digests of this
    store; one written another way never matches, which only stores more."""
    return str(digest.digest()[:16].hex())


def conversation(request: Any) -> tuple[str, list[Any]] | None:
    """The request's growing message list and its field (``MESSAGE_FIELDS``), or None."""
    if not isinstance(request, dict):
        return None
    for name in MESSAGE_FIELDS:
        value = request.get(name)
        if isinstance(value, list):
            return name, value
    return None


def sent_of(request: Any, base: Sent | None = None) -> tuple[Sent, bool] | None:
    """The request's ``Sent``, and whether its messages start, byte for byte, with
    ``base``'s (False without a base); None without a message list (or one orjson
    cannot write). One serialisation and one digest pass, whatever ``base`` is."""
    found = conversation(request)
    if found is None:
        return None
    name, messages = found
    try:
        data = orjson.dumps(messages)
    except orjson.JSONEncodeError:
        return None
    body = memoryview(data)[:-1]
    digest = hashlib.sha256()
    repeated = False
    if (base is not None and base.field == name and base.count > 0
            and len(body) >= base.size and data[base.size:base.size + 1] in (b",", b"]")):
        digest.update(body[:base.size])
        repeated = _hex(digest.copy()) == base.digest
        digest.update(body[base.size:])
    else:
        digest.update(body)
    return Sent(name, len(messages), len(body), _hex(digest)), repeated


@dataclass(slots=True)
class Stored:
    """One decoded blob: ``interaction`` holds only what it adds where ``link`` is
    set (its prompt ids, request messages and keys past the linked prefix)."""

    interaction: Interaction
    link: Link | None
    sent: Sent | None


def _pack(values: array[Any]) -> bytes:
    if _SWAP:
        values = array(values.typecode, values)
        values.byteswap()
    return values.tobytes()


def encode(interaction: Interaction, link: Link | None = None, sent: Sent | None = None) -> bytes:
    """The stored blob of ``interaction``; with ``link``, only what it adds to it."""
    i = interaction
    prompt = i.prompt_token_ids[link.prompt:] if link else i.prompt_token_ids
    request, tito = i.request, i.tito
    if link is not None and link.messages:
        request = dict(request)
        request[link.field] = request[link.field][link.messages:]
    if link is not None and link.keys and tito is not None:
        tito = {**tito, "messages": tito["messages"][link.keys:]}
    if link is not None and link.prompt and tito is not None and "images" in tito:
        tito = {**tito, "images": own_images(tito["images"], link.prompt)}
    header = i.to_storage(tokens=False)
    header.update(request=request, tito=tito, link=link.storage() if link else None,
                  sent=[sent.field, sent.count, sent.size, sent.digest] if sent else None,
                  prompt=len(prompt))
    parts = [b"", orjson.dumps(header), _pack(prompt)]
    for c in i.choices:
        parts += [_pack(c.token_ids), _pack(c.logprobs)]
    parts[0] = _HEAD.pack(_MAGIC, len(parts[1]))
    return b"".join(parts)


def _header(blob: bytes) -> tuple[dict[str, Any], int]:
    magic, size = _HEAD.unpack_from(blob)
    if magic != _MAGIC:
        raise StoreError("unreadable interaction record (neither JSON nor a packed record)")
    start = _HEAD.size
    return orjson.loads(blob[start:start + size]), start + size


def decode(blob: bytes) -> Stored:
    """The blob as stored (``resolve`` rebuilds whole interactions)."""
    if blob[:1] == b"{":
        return Stored(Interaction.from_storage(orjson.loads(blob)), None, None)
    head, at = _header(blob)
    view = memoryview(blob)

    def take(typecode: str, count: int) -> array[Any]:
        nonlocal at
        out = array(typecode)
        out.frombytes(view[at:at + 4 * count])
        if _SWAP:
            out.byteswap()
        at += 4 * count
        return out

    head["prompt_token_ids"] = take("i", head["prompt"])
    for c in head["choices"]:
        ids = take("i", c["ids"])
        c.update(token_ids=ids, logprobs=take("f", c["logprobs"]))
    interaction = Interaction.from_storage(head)
    link = Link(*head["link"]) if head["link"] else None
    sent = Sent(*head["sent"]) if head["sent"] else None
    return Stored(interaction, link, sent)


def with_reward(blob: bytes, reward: float) -> bytes:
    """``blob`` with its interaction's reward set (either form)."""
    if blob[:1] == b"{":
        data = orjson.loads(blob)
        data["reward"] = reward
        return orjson.dumps(data)
    head, at = _header(blob)
    head["reward"] = reward
    data = orjson.dumps(head)
    return _HEAD.pack(_MAGIC, len(data)) + data + blob[at:]


def resolve(blobs: Iterable[bytes]) -> list[Interaction]:
    """The whole interactions of stored blobs, ordered by (request_index,
    interaction_id): each linked prompt, message list and key list rebuilt from what it
    extends. ``StoreError`` when a link names an interaction that is not there."""
    by_id = {s.interaction.interaction_id: s for s in map(decode, blobs)}
    done: dict[str, Interaction] = {}

    def whole(iid: str) -> Interaction:
        chain: list[Stored] = []
        current: str | None = iid
        while current is not None and current not in done:
            item = by_id.get(current)
            if item is None or item in chain:
                raise StoreError(f"interaction record {chain[-1].interaction.interaction_id!r}"
                                 f" extends {current!r}, which is not stored (or extends it back)")
            chain.append(item)
            current = item.link.interaction_id if item.link else None
        for item in reversed(chain):
            done[item.interaction.interaction_id] = _rebuilt(item, done)
        return done[iid]

    return sorted(map(whole, by_id), key=lambda i: (i.request_index, i.interaction_id))


def _rebuilt(item: Stored, done: dict[str, Interaction]) -> Interaction:
    i, link = item.interaction, item.link
    if link is None:
        return i
    base = done[link.interaction_id]
    if link.prompt:
        prompt = array("i", base.prompt_token_ids)
        if link.choice >= 0:
            prompt.extend(base.choices[link.choice].token_ids)
        del prompt[link.prompt:]
        prompt.extend(i.prompt_token_ids)
        i.prompt_token_ids = prompt
    if link.messages:
        request = dict(i.request)
        request[link.field] = base.request[link.field][:link.messages] + request[link.field]
        i.request = request  # dict() then assignment keeps the key order
    if link.keys and i.tito is not None and base.tito is not None:
        i.tito = {**i.tito, "messages": base.tito["messages"][:link.keys] + i.tito["messages"]}
    if link.prompt and i.tito is not None and "images" in i.tito:
        i.tito = {**i.tito, "images": linked_images(base.tito, link.prompt) + i.tito["images"]}
    return i


def own_images(images: list[dict[str, Any]], prompt: int) -> list[dict[str, Any]]:
    """A vision prompt's images past the ``prompt`` ids it shares with the turn it
    extends: those before are that turn's, stored there (each image once a session)."""
    return [image for image in images if image["position"] >= prompt]


def linked_images(base_tito: dict[str, Any] | None, prompt: int) -> list[dict[str, Any]]:
    """The images of the turn a prompt extends that sit in the shared ``prompt`` ids."""
    earlier = (base_tito or {}).get("images") or []
    return [image for image in earlier if image["position"] < prompt]

