"""Tool-call parsers by the names of SGLang's ``--tool-call-parser`` (each format in its
own module under ``tools``; ``tools.base`` says what they all keep).

| name | format |
| --- | --- |
| ``hermes``, ``qwen``, ``qwen25`` | ``<tool_call>{"name", "arguments"}</tool_call>`` |
| ``llama3`` (``llama3-json``) | ``{"name", "parameters"}``, ``<|python_tag|>`` |
| ``mistral`` | ``[TOOL_CALLS][{...}]`` or ``[TOOL_CALLS]name[ARGS]{...}`` |
| ``deepseekv3``, ``deepseekv31`` | ``<｜tool▁calls▁begin｜>`` sections |
| ``kimi_k2`` | ``<|tool_calls_section_begin|>`` sections |
| ``glm45``, ``glm`` | ``<tool_call>NAME`` + ``<arg_key>``/``<arg_value>`` pairs |
| ``gpt-oss`` | ``<|channel|>commentary to=functions.NAME ...<|call|>`` |
| ``pythonic`` | ``[name(key=literal, ...), ...]`` |

Each parser's ``structural_tag`` is the constraint SGLang's chat route puts on its
calls (``tools.structural``): a forcing ``tool_choice`` (``required``, a named
function), or ``auto`` with a strict tool. A forced call through a parser that builds
no tag, or with no ``--tool-parser``, is the JSON array, read by ``ForcedCallParser``
as SGLang's chat route reads a forced call (``seedproxy.tool_choice.parse_forced``):
the whole reply, anything else being content exactly as generated.
Adding a format is its module and one entry here.
"""

from __future__ import annotations

from ..tool_choice import parse_forced
from .tools.base import ToolCall, ToolParser
from .tools.deepseek import DeepSeekV3Parser, DeepSeekV31Parser
from .tools.glm import Glm45Parser
from .tools.gpt_oss import GptOssParser
from .tools.hermes import HermesParser, Qwen25Parser
from .tools.kimi import KimiK2Parser
from .tools.llama3 import Llama3JsonParser
from .tools.mistral import MistralParser
from .tools.pythonic import PythonicParser

__all__ = ["TOOL_PARSERS", "ForcedCallParser", "HermesParser", "Llama3JsonParser",
           "MistralParser", "ToolCall", "ToolParser"]


class ForcedCallParser(ToolParser):
    """Captures the whole reply: a forced call has no text before it."""

    def _find_start(self, text: str) -> tuple[int, int] | None:
        return 0, 0

    def parse(self, captured: str) -> tuple[list[ToolCall], str]:
        calls = parse_forced(captured) or []
        return [ToolCall(name, arguments) for name, arguments in calls], ""


TOOL_PARSERS: dict[str, type[ToolParser]] = {
    "hermes": HermesParser, "qwen": Qwen25Parser, "qwen25": Qwen25Parser,
    "llama3": Llama3JsonParser, "llama3-json": Llama3JsonParser,
    "mistral": MistralParser,
    "deepseekv3": DeepSeekV3Parser, "deepseekv31": DeepSeekV31Parser,
    "kimi_k2": KimiK2Parser, "gpt-oss": GptOssParser,
    "glm45": Glm45Parser, "glm": Glm45Parser, "pythonic": PythonicParser,
}
