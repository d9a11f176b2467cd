"""Per-sequence logits processing: the seam between the decode loop and request features
(grammars, penalties, ``logit_bias``).

Invariants:
- A processor belongs to one sequence (one choice) and is driven by the decode loop only:
  ``process`` on that sequence's next-token logits row, then ``accept`` with the token drawn.
- ``process`` is a pure function of the row and the sequence's own history, never of other
  sequences in a batch, so batching cannot change a token.
"""

from __future__ import annotations

from typing import Protocol

import torch

__all__ = ["LogitsProcessor"]


class LogitsProcessor(Protocol):
    """Adjusts one sequence's next-token logits (a 1-D float32 row over the vocabulary)."""

    def process(self, logits: torch.Tensor, output_ids: list[int]) -> torch.Tensor:
        """Return the adjusted row (may modify ``logits`` in place and return it)."""
        ...

    def accept(self, token_id: int) -> None:
        """Advance the processor's state past the token that was drawn."""
        ...
