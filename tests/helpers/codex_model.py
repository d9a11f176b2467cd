"""A scripted Qwen3 model behind the fake SGLang's ``/generate``, for Codex CLI runs.

``ScriptedQwen3`` wraps ``create_fake_sglang``: before each ``/generate`` reaches the
fake, it decodes the prompt ids with the real Qwen3 tokenizer, reads what a model
would (the tools offered in ``<tools>``, the tool results since the user's last
message) and queues the ids it samples next: a reasoning block, then a call of its
next step's tool, each after checking that the previous step's expected text came
back in the tool result; then an answer naming what it read. The steps are ``calls``
runs of the shell tool (``exec_command``, else ``shell_command`` or ``shell``)
printing ``marker(k)``; with ``patch``, first a freeform ``apply_patch`` call (its
hermes arguments ``{"input": PATCH}``) adding ``notes.txt``, then a shell ``cat`` of
it. A result that did not come back makes the answer say so (``MISSING``), so a run
whose tool results were lost cannot pass. Everything it sampled is kept in
``sampled``, per request, in order.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.types import Message, Receive, Scope, Send

from tests.helpers.fake_sglang import Switches, create_fake_sglang

__all__ = ["PATCH", "PATCHED", "ScriptedQwen3", "marker"]

SHELL_TOOLS = ("exec_command", "shell_command", "shell")
_ARGUMENT = {"exec_command": "cmd", "shell_command": "command"}
PATCHED = "seedproxy-patched"
PATCH = f"*** Begin Patch\n*** Add File: notes.txt\n+{PATCHED}\n*** End Patch\n"


def marker(k: int) -> str:
    """What shell call ``k``'s command prints (the shell works out the product)."""
    return f"seedproxy-step-{k}-{k * 7}"


@dataclass(frozen=True)
class _Step:
    shell: bool
    command: str  # the shell command, or the patch
    expect: str  # what its result must hold


@dataclass
class ScriptedQwen3:
    """The ASGI app: ``/generate`` scripted, everything else the fake SGLang's."""

    tokenizer: Any
    calls: int = 5
    patch: bool = False
    switches: Switches = field(default_factory=Switches)
    sampled: list[list[int]] = field(default_factory=list)
    prompts: list[list[int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.switches.script_stops = True
        self._inner = create_fake_sglang(self.switches)
        self._end = int(self.tokenizer.convert_tokens_to_ids("<|im_end|>"))
        shell = [_Step(True, f"echo seedproxy-step-{k}-$(({k}*7))", marker(k))
                 for k in range(self.calls)]
        self._steps = ([_Step(False, PATCH, "notes.txt"), _Step(True, "cat notes.txt", PATCHED)]
                       if self.patch else shell)

    @property
    def expected(self) -> list[str]:
        """What each step's result must hold, in order (the answer names them)."""
        return [step.expect for step in self._steps]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != "/generate":
            await self._inner(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        raw = b"".join(chunks)
        body = orjson.loads(raw)
        ids = self.reply(list(body.get("input_ids") or []))
        self.switches.script.append(ids)
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": raw, "more_body": False}

        await self._inner(scope, replay, send)

    def reply(self, prompt: list[int]) -> list[int]:
        """The ids sampled after ``prompt`` (its end of turn included)."""
        text = self.tokenizer.decode(prompt)
        tool = _shell_tool(text)
        results = _results_since_user(text)
        read = [step.expect if step.expect in result else "MISSING"
                for step, result in zip(self._steps, results, strict=False)]
        if tool is not None and len(results) < len(self._steps):
            step = self._steps[len(results)]
            thought = f"Step {len(results)}: I read {read[-1] if read else 'nothing yet'}."
            call: dict[str, Any] = {"name": "apply_patch", "arguments": {"input": step.command}}
            if step.shell:
                argument = _ARGUMENT.get(tool, "command")
                value: Any = ["bash", "-lc", step.command] if tool == "shell" else step.command
                call = {"name": tool, "arguments": {argument: value}}
            out = (f"<think>\n{thought}\n</think>\n\n<tool_call>\n{json.dumps(call)}\n"
                   "</tool_call>")
        else:
            out = f"<think>\nI read {len(read)} results.\n</think>\n\nDone: {' '.join(read)}"
        ids = list(self.tokenizer.encode(out, add_special_tokens=False)) + [self._end]
        self.prompts.append(prompt)
        self.sampled.append(ids)
        return ids


def _shell_tool(text: str) -> str | None:
    """The shell tool among the tools the prompt offers (``<tools>`` JSON lines)."""
    block = re.search(r"<tools>\n(.*?)\n</tools>", text, re.S)
    if block is None:
        return None
    names = set()
    for line in block.group(1).splitlines():
        tool = json.loads(line)
        names.add((tool.get("function") or tool).get("name"))
    return next((name for name in SHELL_TOOLS if name in names), None)


def _results_since_user(text: str) -> list[str]:
    """The tool results after the last message the user wrote (not a tool result)."""
    turns = text.split("<|im_start|>user\n")
    since: list[str] = []
    for turn in reversed(turns[1:]):
        if not turn.startswith("<tool_response>"):
            break
        since.insert(0, turn)
    results: list[str] = []
    for turn in since:
        results.extend(re.findall(r"<tool_response>\n(.*?)\n</tool_response>", turn, re.S))
    return results
