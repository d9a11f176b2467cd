"""What a parse worker process runs: a large body read by the same functions as the
event loop's path, its int lists handed back packed (unpickling millions of ints costs
as much as parsing them): each list of 64 or more ints (exactly ``int``, within 64
bits) crosses as an ``array('q')`` with its path, and ``unpacked`` (in the loop) puts
``array.tolist()`` back. An echoed prompt read as a ``TokenIds`` crosses as one.

Invariant: ``unpacked(read_body(e, raw))`` equals ``decode_body(e, raw)``, raising the
same ``BadRequest``; ``unpacked(read_answer(c, k, echoes))`` equals
``loads_echoed(c, k)`` (``echo.packed`` of it with ``echoes``); an answer that is not
JSON comes back as ``Invalid``.
"""

from __future__ import annotations

import os
from array import array
from dataclasses import dataclass
from typing import Any

import orjson

from ..dialects import Endpoint
from ..dialects.echo import loads_echoed, packed
from ..sessions.token_ids import TokenIds
from .request import decode_body

__all__ = ["Invalid", "Packed", "read_answer", "read_body", "ready", "unpacked"]

_PACK_MIN = 64
"""Shorter int lists cross as they are: packing them saves nothing."""

Path = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class Packed:
    """A parsed body whose int lists at ``paths`` were taken out as ``arrays``."""

    tree: Any
    paths: list[Path]
    arrays: list[array[int]]


@dataclass(frozen=True, slots=True)
class Invalid:
    """An upstream answer that is not JSON (``orjson``'s message)."""

    message: str


def ready() -> int:
    """Run once per worker as a pool starts (every worker up before any body is timed)."""
    return os.getpid()


def read_body(endpoint: Endpoint, raw: bytes, hold: str | None = None) -> Packed:
    _wait(hold)
    return _pack(decode_body(endpoint, raw))


def read_answer(content: bytes, known: TokenIds | None, echoes: bool,
                hold: str | None = None) -> Packed | Invalid:
    _wait(hold)
    try:
        answer = loads_echoed(content, known)
    except orjson.JSONDecodeError as exc:
        return Invalid(str(exc))
    return _pack(packed(answer) if echoes else answer)


def unpacked(result: Packed) -> Any:
    """The body ``result`` was packed from (O(the packed ids) in C, plus its paths)."""
    tree = result.tree
    for path, ids in zip(result.paths, result.arrays, strict=True):
        if not path:
            return ids.tolist()
        holder = tree
        for step in path[:-1]:
            holder = holder[step]
        holder[path[-1]] = ids.tolist()
    return tree


def _pack(tree: Any) -> Packed:
    """Take each int list of ``_PACK_MIN`` or more out of ``tree`` (iteratively: depth
    costs no recursion), leaving ``None`` in its place."""
    paths: list[Path] = []
    arrays: list[array[int]] = []
    root = _ints(tree)
    if root is not None:
        return Packed(None, [()], [root])
    stack: list[tuple[Any, Path]] = [(tree, ())] if isinstance(tree, dict | list) else []
    while stack:
        node, path = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, value in items:
            if not isinstance(value, dict | list):
                continue
            ids = _ints(value)
            if ids is None:
                stack.append((value, (*path, key)))
                continue
            paths.append((*path, key))
            arrays.append(ids)
            node[key] = None
    return Packed(tree, paths, arrays)


_INT = frozenset({int})


def _ints(value: Any) -> array[int] | None:
    """``value`` as an ``array('q')`` when it is a list of ``_PACK_MIN`` or more ints
    (bools and int subclasses excluded: ``tolist`` gives back exactly ``value``)."""
    if not isinstance(value, list) or len(value) < _PACK_MIN or set(map(type, value)) != _INT:
        return None
    try:
        return array("q", value)
    except OverflowError:  # an int over 64 bits: crosses as it is
        return None


def _wait(hold: str | None) -> None:
    """Test seam: with ``hold`` (a folder with FIFOs ``entered`` and ``release``), write
    this process's pid to ``entered``, then block until ``release`` is written."""
    if hold is None:
        return
    with open(os.path.join(hold, "entered"), "wb") as entered:
        entered.write(str(os.getpid()).encode())
    with open(os.path.join(hold, "release"), "rb") as release:
        release.read(1)
