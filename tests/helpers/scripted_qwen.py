"""A scripted Qwen3 model for ``/generate``: it decodes its prompt with the real Qwen3
tokenizer and answers as Qwen3 writes (``<tool_call>`` JSON, ``<|im_end|>``), from
what the prompt holds, so a harness drives it through its real tool loop.

``AgentScript`` plays a main loop that calls ``Bash``, then starts a sub-agent with the
``Agent`` tool, then finishes; the sub-agent answers in one turn; a request whose last
user message asks for a summary gets one (in ``<summary>`` tags); a request without
tools (a title) gets a short text. Every answer it gives is kept, in order, with the
prompt it answered (``answers``).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

__all__ = ["AgentScript", "qwen3_ids"]

MARKER_COMMAND = "echo seedproxy-$((6*7))"
SUBAGENT_PROMPT = "SUBAGENT-TASK: reply with the single word ready."
SUMMARY = "The user ran the marker command, which printed seedproxy-42; a sub-agent said ready."
FINAL = "Done: the marker printed seedproxy-42 and the sub-agent said ready."


@dataclass
class AgentScript:
    tokenizer: Any
    answers: list[tuple[list[int], list[int]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, prompt: list[int]) -> list[int]:
        text = str(self.tokenizer.decode(prompt, skip_special_tokens=False))
        out = self.tokenizer.encode(self.answer(text), add_special_tokens=False)
        out.append(self.tokenizer.convert_tokens_to_ids("<|im_end|>"))
        with self.lock:
            self.answers.append((prompt, out))
        return list(out)

    def answer(self, text: str) -> str:
        """The main loop counts the tool results after the last prompt the user typed:
        none, Bash; one, Agent (a prompt holding ``AGAIN``: the final answer); then the
        final answer."""
        users = [t for t in text.split("<|im_start|>")[1:] if t.startswith("user\n")]
        if "<tools>" not in text:
            return "Marker task"
        if users and SUBAGENT_PROMPT in users[0]:
            return "ready"
        typed = [k for k, t in enumerate(users) if "<tool_response>" not in t]
        last = users[typed[-1]] if typed else ""
        if typed and typed[-1] == len(users) - 1 and "summary" in last.lower() and (
                "AGAIN" not in last and "marker" not in last):
            return f"<summary>{SUMMARY}</summary>"
        results = len(users) - 1 - typed[-1] if typed else 0
        if results == 0:
            return _call("Bash", {"command": MARKER_COMMAND, "description": "Print a marker"})
        if results == 1 and "AGAIN" not in last:
            return _call("Agent", {"description": "Check ready", "prompt": SUBAGENT_PROMPT,
                                   "subagent_type": "general-purpose"})
        return FINAL


def _call(name: str, arguments: dict[str, Any]) -> str:
    return ("<tool_call>\n" + json.dumps({"name": name, "arguments": arguments})
            + "\n</tool_call>")


def qwen3_ids(tokenizer: Any, text: str) -> list[int]:
    """``text`` as Qwen3 samples it: its ids, then ``<|im_end|>``."""
    ids = list(tokenizer.encode(text, add_special_tokens=False))
    return ids + [tokenizer.convert_tokens_to_ids("<|im_end|>")]
