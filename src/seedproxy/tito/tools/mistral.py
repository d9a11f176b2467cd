"""``mistral``: ``[TOOL_CALLS]`` then either a JSON list of ``{"name", "arguments"}``
(Mistral 7B v0.3, Nemo) or the compact ``name[ARGS]{...}``, one ``[TOOL_CALLS]`` per
call (Devstral, Mistral Small 3.2), as SGLang's MistralDetector parses both. Text
after the calls is content. Call ids are 9 alphanumeric characters, the only ids
Mistral's templates accept.
"""

from __future__ import annotations

import hashlib
import string

from .base import ToolCall, ToolParser, call_of, decode_at, skip_space
from .structural import CallFrame

__all__ = ["MistralParser", "mistral_call_id"]

_ALPHABET = string.ascii_letters + string.digits


def mistral_call_id(base: str, position: int) -> str:
    """9 characters of [A-Za-z0-9] derived from ``base`` and ``position``."""
    number = int.from_bytes(hashlib.sha256(f"{base}:{position}".encode()).digest()[:8], "big")
    size = len(_ALPHABET)
    return "".join(_ALPHABET[number // size ** k % size] for k in range(9))


class MistralParser(ToolParser):
    start = "[TOOL_CALLS]"
    args = "[ARGS]"
    markers = (start, args)
    frame = CallFrame('[TOOL_CALLS] [{"name":"', '", "arguments":', "}]", start)

    @staticmethod
    def call_id(base: str, position: int, name: str = "", earlier: int = 0) -> str:
        return mistral_call_id(base, position)

    def parse(self, captured: str) -> tuple[list[ToolCall], str]:
        at = skip_space(captured, 0)
        if captured.startswith("[", at) and not captured.startswith(self.args, at):
            return self._array(captured, at)
        calls: list[ToolCall] = []
        pos = 0
        while True:
            sep = captured.find(self.args, at)
            name = captured[at:sep].strip() if sep >= 0 else ""
            named = name and not any(c in "[]{}" or c.isspace() for c in name)
            got = decode_at(captured, sep + len(self.args)) if named else None
            call = call_of({"name": name, "arguments": got[0]}) if got is not None else None
            if got is None or call is None:
                return calls, captured[pos:]
            calls.append(call)
            pos = got[1]
            at = skip_space(captured, pos)
            if not captured.startswith(self.start, at):
                return calls, captured[pos:]
            at += len(self.start)

    def _array(self, captured: str, at: int) -> tuple[list[ToolCall], str]:
        got = decode_at(captured, at)
        if got is None:
            return [], ""
        items = got[0] if isinstance(got[0], list) else [got[0]]
        calls = [call_of(item) for item in items]
        if not calls or not all(calls):
            return [], ""
        return [c for c in calls if c is not None], captured[got[1]:]
