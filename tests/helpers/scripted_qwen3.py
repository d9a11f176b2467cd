"""A scripted Qwen3 model behind the fake SGLang's ``/generate``, for driving real agent
harnesses through seedproxy's token-in-token-out mode.

It reads its prompt as the model would: it decodes the prompt ids with the real Qwen3
tokenizer (``tests/helpers/real_tokenizers``), finds the tools the harness offers in the
system turn's ``<tools>`` block, and counts the tool results since the task's user
message. While fewer than ``ROUNDS`` results came back it calls the harness's shell tool
with a real Qwen3 ``<tool_call>`` (the second call quotes what the first printed); then
it answers ``DONE <what the last call printed>`` (it finds the printed marker in the
harness's wrapping of the result). Every reply ends with ``<|im_end|>``.
A request that offers no shell tool (a harness's title or summary request) gets a short
plain answer. With ``text_actions`` (an agent that acts through a fenced ``bash`` block
in its text, as mini-swe-agent does) the calls are such blocks, the rounds are the
assistant turns so far, and the last block prints the harness's end marker.

``pairs`` keeps every (prompt ids, returned ids), in call order, so that a test can
compare what seedproxy exported with what the model returned, turn by turn.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from typing import Any

from tests.helpers.fake_sglang import Switches
from tests.helpers.real_tokenizers import family

__all__ = ["MARKER", "ROUNDS", "ScriptedQwen3", "shell_commands"]

ROUNDS = 2
MARKER = "seedproxy-42"
"""What the first command prints (``echo seedproxy-$((6*7))``): the arithmetic runs only
in a real shell, so seeing it in a later prompt proves the harness ran the call."""
_TOOLS = re.compile(r"<tools>\n(.*?)\n</tools>", re.S)
_RESULT = re.compile(r"<tool_response>\n(.*?)\n</tool_response>", re.S)
_USER = "<|im_start|>user\n"
_PRINTED = re.compile(r"(?:read )?seedproxy-\d+")
"""What the model looks for in a tool result (harnesses wrap the output in their own text)."""


def _printed(result: str) -> str:
    found = _PRINTED.findall(result)
    return found[-1] if found else ""


def shell_commands(marker_from: str) -> list[str]:
    """The commands of rounds 0 and 1: the second echoes what the first printed."""
    return ["echo seedproxy-$((6*7))", f"echo read {marker_from}"]


@dataclass
class ScriptedQwen3:
    """Pass ``switches()`` to ``create_fake_sglang``. ``shell`` names the harness's shell
    tool (or ``None`` with ``text_actions``); ``end_command`` is the text-action command
    that ends the run (it gets what the last command printed as its argument)."""

    shell: str | None
    text_actions: bool = False
    end_command: str = ""
    fence: str = "bash"
    """The info string of a text action's fenced block."""
    pairs: list[tuple[list[int], list[int]]] = field(default_factory=list)
    offered: list[list[str]] = field(default_factory=list)
    """The tool names each request offered, in call order."""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.tok = family("qwen3")
        self.end_id = int(self.tok.convert_tokens_to_ids("<|im_end|>"))

    def switches(self) -> Switches:
        return Switches(responder=self, script_stops=True, context_length=1 << 20)

    def __call__(self, prompt: list[int]) -> list[int]:
        text = self.tok.decode(prompt)
        out = self.reply(text)
        ids = list(self.tok.encode(out, add_special_tokens=False)) + [self.end_id]
        with self._lock:
            self.pairs.append((list(prompt), ids))
        return ids

    def reply(self, text: str) -> str:
        """The model's text for a decoded prompt."""
        tools = self._tools(text)
        with self._lock:
            self.offered.append([t.get("name", "") for t in tools])
        if self.text_actions:
            return self._text_action(text)
        shell = next((t for t in tools if t.get("name") == self.shell), None)
        if shell is None:
            return "A short title"
        task = text.rfind(_USER)
        while task > 0 and text.startswith(_USER + "<tool_response>", task):
            task = text.rfind(_USER, 0, task)
        results = _RESULT.findall(text[task:])
        if len(results) >= ROUNDS:
            return f"DONE {_printed(results[-1])}"
        command = shell_commands(_printed(results[-1]) if results else "")[len(results)]
        call = {"name": self.shell, "arguments": _arguments(shell, command)}
        return f"<tool_call>\n{json.dumps(call)}\n</tool_call>"

    def _text_action(self, text: str) -> str:
        rounds = text.count("<|im_start|>assistant\n") - 1  # the last one opens this reply
        last = _printed(text[text.rfind(_USER):])
        if rounds >= ROUNDS:
            return f"Finishing.\n\n```{self.fence}\n{self.end_command} '{last}'\n```"
        return f"Running a step.\n\n```{self.fence}\n{shell_commands(last)[rounds]}\n```"

    @staticmethod
    def _tools(text: str) -> list[dict[str, Any]]:
        found = _TOOLS.search(text)
        if not found:
            return []
        tools = []
        for line in found.group(1).splitlines():
            entry = json.loads(line)
            tools.append(entry.get("function", entry))
        return tools


def _arguments(tool: dict[str, Any], command: str) -> dict[str, Any]:
    """The shell command under its ``command`` key, and a plain value for every other
    required parameter (a description, say) that the harness's schema asks for."""
    schema = tool.get("parameters") or {}
    arguments: dict[str, Any] = {"command": command}
    for name in schema.get("required") or []:
        if name not in arguments:
            kind = (schema.get("properties") or {}).get(name, {}).get("type")
            arguments[name] = 60000 if kind in ("integer", "number") else "Run a step"
    return arguments
