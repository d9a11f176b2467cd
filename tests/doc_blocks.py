"""The code blocks of README.md and docs/*.md: fenced (```lang) and indented ones, each
with the reason it is not run when a ``<!-- not run: REASON -->`` comment precedes it
(blank lines between allowed)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ROOT", "Block", "blocks", "pages"]

ROOT = Path(__file__).resolve().parents[1]
_MARK = re.compile(r"<!-- not run: (.+?) -->")


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    lang: str  # the fence's info string; "" for an indented block
    text: str
    not_run: str | None

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _mark(lines: list[str], start: int) -> str | None:
    i = start - 1
    while i >= 0 and not lines[i].strip():
        i -= 1
    found = _MARK.fullmatch(lines[i].strip()) if i >= 0 else None
    return found.group(1) if found else None


def blocks(path: Path) -> list[Block]:
    """Top-level blocks only: an indented block starts after a blank line, outside a
    list item (whose continuation lines are indented too)."""
    lines = path.read_text().split("\n")
    page = str(path.relative_to(ROOT))
    found: list[Block] = []
    i, in_list = 0, False
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            found.append(Block(page, i + 1, line[3:].strip(), "\n".join(lines[i + 1 : end]),
                               _mark(lines, i)))
            i = end + 1
            continue
        if re.match(r"([-*]|\d+\.) ", line):
            in_list = True
        elif line.strip() and not line.startswith(" "):
            in_list = False
        if line.startswith("    ") and not in_list and (i == 0 or not lines[i - 1].strip()):
            end = i
            while end < len(lines) and (lines[end].startswith("    ") or (
                    not lines[end].strip() and end + 1 < len(lines)
                    and lines[end + 1].startswith("    "))):
                end += 1
            text = "\n".join(row[4:] for row in lines[i:end])
            found.append(Block(page, i + 1, "", text, _mark(lines, i)))
            i = end
            continue
        i += 1
    return found
