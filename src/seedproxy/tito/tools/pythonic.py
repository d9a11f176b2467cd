"""``pythonic``: a Python list of keyword calls, ``[get_weather(city="Paris"),
search(query="x")]`` (Llama 3.2 and 4 prompted for it, and models trained on it), as
SGLang's PythonicDetector parses it.

- A list opens where ``[`` is followed at once by a name and ``(``; text before it is
  content, and so is text after its matching ``]`` (brackets counted as SGLang counts
  them, strings not excepted). Later lists in the same answer are read the same way.
- A list is read with Python's own parser, never evaluated: it must be a list whose
  items are all calls. A call's function must be a plain name; its keyword arguments
  must be literals (strings, numbers, booleans, ``None``, and lists and dicts of them),
  written to JSON as SGLang writes them (``ensure_ascii=False``, no NaN or infinity).
  A call with another argument, or a positional one, is left out, as SGLang leaves it
  out; a list with no call left stays content, as with every parser here. A call to a
  name missing from ``tools`` is still a call (SGLang drops it).
- The model's text is bounded before parsing: a list over ``_MAX_LIST`` characters, or
  nested past ``nesting.MAX_DEPTH`` brackets, is not a call.
"""

from __future__ import annotations

import ast
import json
import re
import warnings
from typing import Any

from ...nesting import MAX_DEPTH
from .base import ToolCall, ToolParser

__all__ = ["PythonicParser"]

_OPEN = re.compile(r"\[[A-Za-z]\w*\(")
_PARTIAL = re.compile(r"\[(?:[A-Za-z]\w*)?\Z")
_MAX_LIST = 1 << 20


class PythonicParser(ToolParser):
    start = "["

    def _find_start(self, text: str) -> tuple[int, int] | None:
        found = _OPEN.search(text)
        return (found.start(), 1) if found else None

    def _hold(self, text: str) -> int:
        partial = _PARTIAL.search(text)
        return len(text) - partial.start() if partial else 0

    def parse(self, captured: str) -> tuple[list[ToolCall], str]:
        calls: list[ToolCall] = []
        outside: list[str] = []
        rest = "[" + captured
        while True:
            end = _closing(rest)
            if end is None:
                outside.append(rest)
                break
            block, rest = rest[:end + 1], rest[end + 1:]
            got = _calls(block)
            if got:
                calls += got
            else:
                outside.append(block)
            found = _OPEN.search(rest)
            if found is None:
                outside.append(rest)
                break
            outside.append(rest[:found.start()])
            rest = rest[found.start():]
        return calls, "".join(outside)


def _closing(text: str) -> int | None:
    """The index of the ``]`` that closes ``text[0]``, or None (unclosed, too deep)."""
    depth = 0
    for at, char in enumerate(text):
        if char == "[":
            depth += 1
            if depth > MAX_DEPTH:
                return None
        elif char == "]":
            depth -= 1
            if depth == 0:
                return at
    return None


def _calls(block: str) -> list[ToolCall]:
    """The calls of one bracketed list (none when it is not a list of calls)."""
    if len(block) > _MAX_LIST:
        return []
    try:
        # An invalid escape (``"\\d+"``) keeps its backslash and only warns: never an
        # error here (as in SGLang). Parsers run on the event loop's thread, so this
        # process-wide warnings state is not raced by another parse.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=SyntaxWarning)
            warnings.filterwarnings("ignore", category=DeprecationWarning)
            tree = ast.parse(block, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    body = tree.body
    if not isinstance(body, ast.List) or not all(isinstance(e, ast.Call) for e in body.elts):
        return []
    calls: list[ToolCall] = []
    for call in body.elts:
        if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name) or call.args:
            continue  # positional arguments: SGLang's pattern reads keywords only
        try:
            arguments = {_keyword(k): _literal(k.value, 0) for k in call.keywords}
            text = json.dumps(arguments, ensure_ascii=False, allow_nan=False)
        except ValueError:
            continue
        calls.append(ToolCall(call.func.id, text))
    return calls


def _keyword(keyword: ast.keyword) -> str:
    if keyword.arg is None:  # ``**mapping``
        raise ValueError("not a keyword argument")
    return keyword.arg


def _literal(node: ast.expr, depth: int) -> Any:
    """A JSON value from a literal node; ``ValueError`` for anything else."""
    if depth > MAX_DEPTH:
        raise ValueError("nested too deeply")
    if isinstance(node, ast.Constant):
        if node.value is None or isinstance(node.value, str | int | float):
            return node.value
        raise ValueError("a constant with no JSON form")
    if isinstance(node, ast.List):
        return [_literal(item, depth + 1) for item in node.elts]
    if isinstance(node, ast.Dict):
        out: dict[str, Any] = {}
        for key, value in zip(node.keys, node.values, strict=True):
            if not isinstance(key, ast.Constant) or not (
                    key.value is None or isinstance(key.value, str | int | float)):
                raise ValueError("a dict key with no JSON form")
            out[json.dumps(key.value) if not isinstance(key.value, str) else key.value] = (
                _literal(value, depth + 1))
        return out
    raise ValueError("arguments must be literals")
