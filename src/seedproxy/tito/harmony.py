"""OpenAI's harmony format (gpt-oss): what token-in-token-out needs to know of it.

A harmony turn is a run of messages, each ``[<|start|>assistant]<|channel|>HEADER
<|message|>BODY`` closed by ``<|end|>`` (the message ends, the turn goes on),
``<|call|>`` (a tool call) or ``<|return|>`` (the final answer). So the stop ids are
``<|return|>`` and ``<|call|>``, never ``<|end|>``.

The chat template writes an assistant turn sent back differently from how the model
sampled it (analysis dropped, ``<|end|>`` for ``<|return|>``, a call's header in its
own order), and the recorded completion holds the channel header the model sampled
after ``<|start|>assistant``: the next turn is the recorded prompt + the completion as
sampled + the new messages as the template writes them after such a turn.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CALL", "CHANNEL", "CONSTRAIN", "END", "FINAL_HEADER", "MARKERS", "MESSAGE",
           "RETURN", "START", "harmony_of"]

START = "<|start|>"
CHANNEL = "<|channel|>"
MESSAGE = "<|message|>"
CONSTRAIN = "<|constrain|>"
END = "<|end|>"
CALL = "<|call|>"
RETURN = "<|return|>"
MARKERS = (START, CHANNEL, MESSAGE, CONSTRAIN, END, CALL, RETURN)
FINAL_HEADER = CHANNEL + "final" + MESSAGE
"""What the template writes between ``<|start|>assistant`` and a final answer."""


def harmony_of(tokenizer: Any, eot_text: str) -> tuple[int, int] | None:
    """The turn ends' ids (``<|return|>``, ``<|call|>``) when the template ends a message
    with ``<|end|>`` and every harmony marker is one token of the tokenizer; else None."""
    if eot_text != END:
        return None
    ids = {marker: list(tokenizer.encode(marker, add_special_tokens=False))
           for marker in MARKERS}
    if any(len(got) != 1 for got in ids.values()):
        return None
    return int(ids[RETURN][0]), int(ids[CALL][0])
