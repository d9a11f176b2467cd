"""Real Mistral tekken tokenizers from mistral-common, built offline and cached.

``tekken_240911.json`` (shipped with mistral-common) is Mistral Nemo's v3 tekken: an
assistant's tool calls encode as ``[TOOL_CALLS][{"name", "arguments", "id"}]``. The same
vocabulary declared v13 with its control tokens (``[ARGS]`` at 32, ``[CALL_ID]`` at 33,
as Mistral's v11+ files place them) encodes them as Devstral and Mistral Small 3.2 emit
them: ``[TOOL_CALLS]name[ARGS]{...}``, once per call.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["assistant_ids", "tekken"]

_CONTROL = {32: "[ARGS]", 33: "[CALL_ID]"}


def _shipped() -> Path:
    import mistral_common

    return Path(mistral_common.__file__).parent / "data" / "tekken_240911.json"


def tekken(version: str, root: Path) -> Any:
    """A ``MistralTokenizer`` of tekken ``version`` (``v3`` or ``v13``)."""
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer

    if version == "v3":
        return MistralTokenizer.from_file(str(_shipped()))
    path = root / f"tekken_{version}.json"
    if not path.is_file():
        data = json.loads(_shipped().read_text(encoding="utf-8"))
        specials = [dict(s) for s in Tekkenizer.DEPRECATED_SPECIAL_TOKENS]
        for rank in range(len(specials), data["config"]["default_num_special_tokens"]):
            name = _CONTROL.get(rank, Tekkenizer.SPECIAL_TOKEN_TEMPLATE.format(id=rank))
            specials.append({"rank": rank, "token_str": name, "is_control": True})
        data["special_tokens"] = specials
        data["config"]["version"] = version
        root.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data), encoding="utf-8")
    return MistralTokenizer.from_file(str(path))


def assistant_ids(tokenizer: Any, content: str | None, calls: list[tuple[str, str]]) -> list[int]:
    """The ids of an assistant turn (``</s>`` included) as mistral-common encodes it:
    what the model emits. ``calls``: (name, arguments JSON)."""
    from mistral_common.protocol.instruct.messages import AssistantMessage
    from mistral_common.protocol.instruct.tool_calls import FunctionCall, ToolCall

    message = AssistantMessage(content=content, tool_calls=[
        ToolCall(id=f"call{k:05d}", function=FunctionCall(name=name, arguments=args))
        for k, (name, args) in enumerate(calls)] or None)
    ids: list[int] = tokenizer.instruct_tokenizer.encode_assistant_message(
        message, is_before_last_user_message=False)
    return ids
