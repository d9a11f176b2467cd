"""A session's recorded turns as the hot path needs them, kept per process.

A ``SessionView`` holds each recorded interaction in its stored-once form (what it adds
to the turn it extends): enough to match a new turn against (token-in-token-out) and to
link a new record to its base (``codec.Link``). ``Cursors`` keeps one view per session,
with its record, found by id or key. A request checks its view in the operation that
seats it (``SessionStore.allocate``'s ``after``: newer records, from any replica, come
back instead of a slot), and a record this process stores joins the view with no read
(``take``): a turn costs what it adds, never a reload. A view is keyed by the session's
``created_seq`` and ``created_at``: a session created again under its id starts afresh.
"""

from __future__ import annotations

import bisect
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, overload

from .codec import Link, Sent, Signed, Stored, decode, linked_images, sent_of
from .interaction import ChoiceRecord, Interaction
from .record import Recorded, SessionRecord
from .token_ids import TokenIds, ids_text, join_text

__all__ = ["Cursors", "SessionView", "Turn"]


class Turn:
    """One recorded interaction as the view holds it; ``prompt_token_ids`` and the
    ``tito`` message keys are rebuilt from the turns it extends on first use."""

    __slots__ = ("_images", "_keys", "_view", "added", "choices", "interaction_id", "link",
                 "request_index", "sent", "status", "tito")

    def __init__(self, stored: Stored, view: SessionView) -> None:
        i = stored.interaction
        self.interaction_id = i.interaction_id
        self.request_index = i.request_index
        self.status = i.status
        self.choices: list[ChoiceRecord] = i.choices
        self.tito: dict[str, Any] | None = i.tito
        self.added = i.prompt_token_ids
        self.link = stored.link
        self.sent = stored.sent
        self._keys: list[str] | None = None if stored.link and stored.link.keys else (
            (i.tito or {}).get("messages") or [])
        linked = stored.link is not None and stored.link.prompt and "images" in (i.tito or {})
        self._images: list[dict[str, Any]] | None = None if linked else (
            (i.tito or {}).get("images") or [])
        self._view = view

    @property
    def prompt_token_ids(self) -> array[int]:
        return self._view.prompt_of(self)

    def prompt_ids(self) -> TokenIds:
        return self._view.prompt_ids(self)

    def keys(self) -> list[str]:
        """The token-in-token-out keys of its messages, whole."""
        if self._keys is None:
            link = self.link
            assert link is not None and self.tito is not None
            base = self._view.turn(link.interaction_id).keys()
            self._keys = base[:link.keys] + (self.tito.get("messages") or [])
            self.tito = {**self.tito, "messages": self._keys}
        return self._keys

    def images(self) -> list[dict[str, Any]]:
        """A vision prompt's image records, whole (``codec.linked_images``)."""
        if self._images is None:
            link = self.link
            assert link is not None and self.tito is not None
            base = self._view.turn(link.interaction_id)
            base.images()
            self._images = linked_images(base.tito, link.prompt) + self.tito["images"]
            self.tito = {**self.tito, "images": self._images}
        return self._images

    def matching(self) -> Turn:
        """Itself, with ``tito["messages"]`` and ``tito["images"]`` whole (what lineage
        matching reads)."""
        if self.tito is not None:
            self.keys()
            self.images()
        return self


class SessionView:
    """The recorded turns of one session, up to store sequence number ``seq``."""

    def __init__(self, record: SessionRecord) -> None:
        self.record = record
        self.created = (record.created_seq, record.created_at)
        self.seq = -1
        self._turns: dict[str, Turn] = {}
        self._order: list[tuple[int, str]] = []
        self._last: str | None = None
        self._memo: tuple[str, array[int], bytes | None] | None = None
        """The last prompt rebuilt: (interaction id, its ids, their JSON text or None)."""

    def apply(self, seq: int, blobs: list[bytes]) -> None:
        """Take the records of a ``changes`` answer; an answer older than what the
        view holds already (a concurrent call that returned late) is skipped."""
        if seq <= self.seq:
            return
        self.seq = seq
        for blob in blobs:
            self._put(decode(blob))

    def take(self, done: Recorded) -> None:
        """Take a record this process stored, when the view held every one before it."""
        if done.current:
            self.apply(done.seq, [done.blob])

    def _put(self, stored: Stored) -> None:
        turn = Turn(stored, self)
        iid = turn.interaction_id
        old = self._turns.get(iid)
        if old is not None:
            self._order.remove((old.request_index, iid))
            self._memo = None
        self._turns[iid] = turn
        bisect.insort(self._order, (turn.request_index, iid))
        self._last = iid

    def turn(self, interaction_id: str) -> Turn:
        return self._turns[interaction_id]

    def turns(self) -> Sequence[Turn]:
        """Every turn, ordered by (request_index, interaction_id); each is made whole
        for matching when read, so reading the last few costs what they hold."""
        return _Turns(self)

    @property
    def _last_turn(self) -> Turn | None:
        return self._turns.get(self._last) if self._last is not None else None

    def last_prompt(self) -> TokenIds | None:
        """The prompt of the turn recorded last, with its JSON text; None without one."""
        last = self._last_turn
        if last is None or not (last.added or last.link):
            return None
        return self.prompt_ids(last)

    def last_sent(self) -> tuple[str, Sent] | None:
        """The turn recorded last: its interaction id and its request's ``Sent``."""
        last = self._last_turn
        if last is None or last.sent is None:
            return None
        return last.interaction_id, last.sent

    def known_keys(self, request: dict[str, Any], signed: Signed | None = None) -> list[str]:
        """The token-in-token-out keys of ``request``'s first messages when they are,
        byte for byte, the messages the last turn recorded sent (its keys, then); else
        []. Costs a serialisation and a digest of the messages, no key per message
        (none when ``signed``, the request's signature, was made against that turn)."""
        last = self._last_turn
        if last is None or last.sent is None or last.tito is None:
            return []
        found = signed.against(last.interaction_id, last.sent) if signed is not None else None
        if found is None:
            found = sent_of(request, last.sent)
        if found is None or not found[1]:
            return []
        keys = last.keys()
        return keys if len(keys) == last.sent.count else []  # not a continued message

    def prompt_of(self, turn: Turn) -> array[int]:
        """The turn's whole prompt ids: the linked prefix, then what it added. The last
        one rebuilt is kept, so the next turn of a branch costs only what it adds."""
        return self._rebuild(turn)[0]

    def prompt_ids(self, turn: Turn) -> TokenIds:
        """The turn's prompt with its JSON text, kept like ``prompt_of``'s: a branch's
        next turn extends the text by what it adds (a cold view writes it once)."""
        ids, text = self._rebuild(turn)
        if text is None:
            text = ids_text(ids)
            self._memo = (turn.interaction_id, ids, text)
        return TokenIds(ids, text)

    def _rebuild(self, turn: Turn) -> tuple[array[int], bytes | None]:
        chain: list[Turn] = []  # from ``turn`` back to a root, or to the kept one
        current: Turn | None = turn
        out = array("i")
        text: bytes | None = b""  # None once a step cuts ids off: written on demand
        while current is not None:
            if self._memo is not None and self._memo[0] == current.interaction_id:
                if current is turn:
                    return self._memo[1], self._memo[2]
                out.extend(self._memo[1])
                text = self._memo[2]
                break
            chain.append(current)
            link = current.link
            current = self._turns[link.interaction_id] if link and link.prompt else None
        for step in reversed(chain):
            link = step.link
            if link is not None and link.prompt:  # ``out`` is its base's prompt now
                if link.choice >= 0:
                    completion = self._turns[link.interaction_id].choices[link.choice].token_ids
                    out.extend(completion)
                    text = _joined(text, completion)
                if link.prompt < len(out):
                    del out[link.prompt:]
                    text = None
            out.extend(step.added)
            text = _joined(text, step.added)
        self._memo = (turn.interaction_id, out, text)
        return out, text

    def link_for(self, interaction: Interaction, signed: Signed | None = None
                 ) -> tuple[Link | None, Sent | None]:
        """How ``interaction`` is stored once: the turn it extends (its token-in-token-out
        lineage, else the last turn recorded) and how much of it it repeats.
        ``signed``: its request's signature, reused when made against that turn."""
        base = self._base(interaction)
        base_sent = base.sent if base is not None else None
        found = (signed.against(base.interaction_id if base is not None else None, base_sent)
                 if signed is not None else None)
        if found is None:
            found = sent_of(interaction.request, base_sent)
        sent = found[0] if found else None
        if base is None:
            return None, sent
        prompt, choice = self._prompt_link(base, interaction)
        messages = 0
        if found is not None and found[1] and base.sent is not None:
            messages = base.sent.count
        keys = 0
        if interaction.tito is not None and base.tito is not None:
            earlier = base.keys()
            mine = interaction.tito.get("messages") or []
            if earlier and mine[:len(earlier)] == earlier:
                keys = len(earlier)
        if not (prompt or messages or keys):
            return None, sent
        field = sent.field if sent is not None else "messages"
        return Link(base.interaction_id, choice, prompt, messages, keys, field), sent

    def _base(self, interaction: Interaction) -> Turn | None:
        extends = (interaction.tito or {}).get("extends")
        wanted = extends.get("interaction_id") if isinstance(extends, dict) else self._last
        base = self._turns.get(wanted) if isinstance(wanted, str) else None
        iid = interaction.interaction_id
        if base is None or base.interaction_id == iid:
            return None
        if iid in self._turns:  # a replacement: never link into a cycle
            current: Turn | None = base
            while current is not None and current.link is not None:
                if current.link.interaction_id == iid:
                    return None
                current = self._turns.get(current.link.interaction_id)
        return base

    def _prompt_link(self, base: Turn, interaction: Interaction) -> tuple[int, int]:
        ids = interaction.prompt_token_ids
        if not ids:
            return 0, 0
        whole = base.prompt_token_ids
        size = len(whole)
        if size > len(ids) or ids[:size] != whole:
            return 0, 0
        extends = (interaction.tito or {}).get("extends")
        wanted = extends.get("choice") if isinstance(extends, dict) else None
        for choice, record in enumerate(base.choices):
            if wanted is not None and choice != wanted:
                continue
            end = size + len(record.token_ids)
            if end <= len(ids) and ids[size:end] == record.token_ids:
                return end, choice
        return (size, -1) if size else (0, 0)


class _Turns(Sequence[Turn]):
    def __init__(self, view: SessionView) -> None:
        self._view = view
        self._order = list(view._order)

    def __len__(self) -> int:
        return len(self._order)

    @overload
    def __getitem__(self, index: int) -> Turn: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Turn]: ...

    def __getitem__(self, index: int | slice) -> Turn | Sequence[Turn]:
        if isinstance(index, slice):
            return [self._view.turn(iid).matching() for _, iid in self._order[index]]
        return self._view.turn(self._order[index][1]).matching()


def _joined(text: bytes | None, ids: array[int]) -> bytes | None:
    return None if text is None else join_text(text, ids_text(ids)) if ids else text


class Cursors:
    """One ``SessionView`` per recently used session (at most ``capacity``), found by
    session id or key, with no store operation."""

    def __init__(self, *, capacity: int = 256) -> None:
        self._views: OrderedDict[str, SessionView] = OrderedDict()
        self._keys: dict[str, str] = {}
        """api_key -> session_id of each view's session."""
        self._capacity = capacity

    def keep(self, record: SessionRecord) -> SessionView:
        """The session's view, made (empty) when there is none for this session; no
        store operation."""
        view = self.peek(record)
        if view is None:
            self.forget(record.session_id)
            view = self._views[record.session_id] = SessionView(record)
            self._keys[record.api_key] = record.session_id
        self._views.move_to_end(record.session_id)
        while len(self._views) > self._capacity:
            self.forget(next(iter(self._views)))
        return view

    def known(self, session_id: str) -> SessionRecord | None:
        """The record of a session with a view here (no store operation; it may be
        gone from the store: ``allocate`` with its ``created_seq`` tells)."""
        view = self._views.get(session_id)
        return view.record if view is not None else None

    def by_key(self, api_key: str) -> SessionRecord | None:
        """``known`` for the session ``api_key`` opens."""
        session_id = self._keys.get(api_key)
        return self.known(session_id) if session_id is not None else None

    def peek(self, record: SessionRecord) -> SessionView | None:
        """The session's view as it stands (no store operation; it may lag)."""
        view = self._views.get(record.session_id)
        created = (record.created_seq, record.created_at)
        return view if view is not None and view.created == created else None

    def forget(self, session_id: str) -> None:
        view = self._views.pop(session_id, None)
        if view is not None:
            self._keys.pop(view.record.api_key, None)
