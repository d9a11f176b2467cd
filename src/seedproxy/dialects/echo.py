"""Reading an answer that echoes a long prompt's ids without parsing the part known (a
long rollout's prompt is mostly the prompt of a turn already recorded).

Where the answer's one ``"prompt_token_ids":[`` list starts with exactly the known
prompt's JSON text (then ``,`` or ``]``), that part is compared byte for byte and cut,
only the rest parsed, and the list comes back as a ``TokenIds`` (the known ids + the
rest, checked as ``ints`` checks them). Anything else is a plain parse: the result is
always what ``orjson.loads`` and ``ints`` would give.
"""

from __future__ import annotations

from array import array
from typing import Any

import orjson

from ..sessions.token_ids import TokenIds, join_text
from ..wire.shapes import ids_json, ints

__all__ = ["holders", "loads_echoed", "packed"]

_KEY = b'"prompt_token_ids":['
_MARK = "\x00seedproxy-known-prompt"
_MARK_JSON = orjson.dumps(_MARK)


def loads_echoed(content: bytes, known: TokenIds | None) -> Any:
    """``orjson.loads(content)``, with the echoed prompt list as a ``TokenIds`` when
    it starts with ``known``'s ids; raises what ``orjson.loads`` raises."""
    if known is None or not known.text:
        return orjson.loads(content)
    at = content.find(_KEY)
    if at < 0 or content.find(_KEY, at + 1) >= 0:
        return orjson.loads(content)
    start = at + len(_KEY)
    end = start + len(known.text)
    if content[end:end + 1] not in (b",", b"]") or not content.startswith(known.text, start):
        return orjson.loads(content)
    answer = orjson.loads(content[:start] + _MARK_JSON + content[end:])
    found = _marked(answer)
    if found is None:
        return orjson.loads(content)
    holder, rest = found
    tail = ints(rest[1:])
    if len(tail) != len(rest) - 1:  # not token ids: as the whole list would read
        return orjson.loads(content)
    added = array("i", tail)
    holder["prompt_token_ids"] = TokenIds(known.ids + added,
                                          join_text(known.text, orjson.dumps(tail)[1:-1]))
    return answer


def holders(answer: Any) -> list[dict[str, Any]]:
    """Where an answer's echoed ``prompt_token_ids`` may be: the answer itself (SGLang
    completions) or one of its choices."""
    found = [answer] if isinstance(answer, dict) else []
    choices = answer.get("choices") if isinstance(answer, dict) else None
    if isinstance(choices, list):
        found += [c for c in choices if isinstance(c, dict)]
    return found


def packed(answer: Any) -> Any:
    """``answer`` with each echoed prompt that ``ints`` accepts as a ``TokenIds``, as
    ``loads_echoed`` gives the one it read past a known prefix (what a backend that
    ``echoes_prompt`` reads the same as the list)."""
    for holder in holders(answer):
        value = holder.get("prompt_token_ids")
        if not isinstance(value, list) or not value:
            continue
        text = ids_json(value)
        if text is not None:
            holder["prompt_token_ids"] = TokenIds(array("i", value), text[1:-1])
    return answer


def _marked(answer: Any) -> tuple[dict[str, Any], list[Any]] | None:
    """The object holding the marked list: the answer itself or one of its choices."""
    for holder in holders(answer):
        value = holder.get("prompt_token_ids")
        if isinstance(value, list) and value and value[0] == _MARK:
            return holder, value
    return None
