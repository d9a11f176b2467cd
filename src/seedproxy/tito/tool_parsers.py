"""Tool-call parsers by the names of SGLang's ``--tool-call-parser``, one format per
module under ``tools`` (adding one is its module and an entry here).

A forced call through a parser that builds no structural tag (``tools.structural``), or
with no ``--tool-parser``, is the JSON array, read by ``ForcedCallParser`` as SGLang's
chat route reads a forced call (``seedproxy.tool_choice.parse_forced``): the whole
reply, anything else being content exactly as generated.
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
