"""``pythonic``: a Python list of keyword calls, ``[get_weather(city="Paris"),
search(query="x")]`` (Llama 3.2 and 4 prompted for it, and models trained on it), as
SGLang's PythonicDetector parses it.

- A list opens where ``[`` is followed at once by a name and ``(``, and ends at its
  matching ``]`` (brackets counted as SGLang counts them, strings not excepted).
- A list is read with Python's own parser, never evaluated: it must be a list whose
  items are all calls. A call's function must be a plain name; its keyword arguments
  must be literals, written to JSON as SGLang writes them (``ensure_ascii=False``, no
  NaN or infinity). A call with another argument, or a positional one, is left out, as
  SGLang leaves it out. A call to a name missing from ``tools`` is still a call (SGLang
  drops it).
- A list over ``_MAX_LIST`` characters, or nested past ``nesting.MAX_DEPTH`` brackets,
  is not a call.
"""

from __future__ import annotations

import ast
import json
import re
import warnings
from typing import Any

from ...nesting import MAX_DEPTH
from .base import ToolCall, ToolParser, tagged_calls

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
        return tagged_calls(captured, "[", _block, self._find_start)


def _block(rest: str) -> tuple[list[ToolCall] | None, int]:
    """The calls of the list a ``[`` before ``rest`` opens (None: it is not a list of
    calls), and where its matching ``]`` ends it (unclosed or too deep: the end)."""
    depth = 1
    for at, char in enumerate(rest):
        depth += (char == "[") - (char == "]")
        if depth > MAX_DEPTH:
            break
        if depth == 0:
            return _calls("[" + rest[:at + 1]) or None, at + 1
    return None, len(rest)


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
        if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name) or call.args or (
                any(k.arg is None for k in call.keywords)):
            continue  # positional arguments, ``**mapping``: SGLang reads keywords only
        try:
            arguments = {k.arg: _literal(k.value, 0) for k in call.keywords}
            text = json.dumps(arguments, ensure_ascii=False, allow_nan=False)
        except ValueError:
            continue
        calls.append(ToolCall(call.func.id, text))
    return calls


def _literal(node: ast.expr, depth: int) -> Any:
    """A JSON value from a literal node; ``ValueError`` for anything else."""
    if depth > MAX_DEPTH:
        raise ValueError("nested too deeply")
    if isinstance(node, ast.Constant) and (
            node.value is None or isinstance(node.value, str | int | float)):
        return node.value
    if isinstance(node, ast.List):
        return [_literal(item, depth + 1) for item in node.elts]
    if isinstance(node, ast.Dict):
        out: dict[str, Any] = {}
        for key, value in zip(node.keys, node.values, strict=True):
            if not isinstance(key, ast.Constant):
                raise ValueError("a dict key with no JSON form")
            name = _literal(key, depth)
            out[name if isinstance(name, str) else json.dumps(name)] = _literal(value, depth + 1)
        return out
    raise ValueError("arguments must be literals")
