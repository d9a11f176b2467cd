"""``gpt-oss``: harmony tool calls, as SGLang 0.5.23's GptOssDetector reads them:
``[<|start|>assistant]<|channel|>commentary to=functions.NAME <|constrain|>json
<|message|>{...}<|call|>``. The name is the part after the last dot; empty arguments
are ``{}``. The ``gpt-oss`` reasoning parser passes such a message on whole, so what
is around the calls is the final answer and any preamble. A block that is not a call
(another header order, JSON that does not parse) stays in the content as written.
"""

from __future__ import annotations

import re

from ...stop_strings import partial_tag
from ..harmony import CALL, CHANNEL, CONSTRAIN, END, MESSAGE, RETURN, START
from .base import ToolCall, ToolParser, call_of, loads, tagged_calls

__all__ = ["GptOssParser"]

_ASSISTANT = START + "assistant"
_START = "<|channel|>commentary to="
_HEAD = re.compile(r"([A-Za-z_][\w.\-]*)\s*" + re.escape(CONSTRAIN + "json" + MESSAGE))


class GptOssParser(ToolParser):
    start = _START
    markers = (START, CHANNEL, MESSAGE, CONSTRAIN, END, CALL, RETURN)
    kept_stops = (CALL,)

    def _find_start(self, text: str) -> tuple[int, int] | None:
        at = text.find(_START)
        if at < 0:
            return None
        if at >= len(_ASSISTANT) and text.startswith(_ASSISTANT, at - len(_ASSISTANT)):
            return at - len(_ASSISTANT), len(_ASSISTANT) + len(_START)
        return at, len(_START)

    def _hold(self, text: str) -> int:
        return max(partial_tag(text, _ASSISTANT + _START), partial_tag(text, _START))

    def parse(self, captured: str) -> tuple[list[ToolCall], str]:
        return tagged_calls(captured, self._raw_marker, _call, self._find_start)


def _call(text: str) -> tuple[list[ToolCall] | None, int]:
    """The call whose header ends the marker at ``text``'s start, and where its block
    ends (after ``<|call|>``, else the end)."""
    end = text.find(CALL)
    body_end = len(text) if end < 0 else end
    head = _HEAD.match(text, 0, body_end)
    body = text[head.end():body_end] if head else ""
    call = call_of({"name": head.group(1).rsplit(".", 1)[-1],
                    "arguments": loads(body) if body.strip() else {}}) if head else None
    return [call] if call else None, len(text) if end < 0 else end + len(CALL)
