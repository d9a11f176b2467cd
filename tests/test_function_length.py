"""No function or method in seedproxy runs over 80 lines.

Measured with ``ast``: from the ``def`` line (decorators excluded) to the function's last
line, docstring and nested functions included. A longer function is split into named
steps that each own what they produce."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "src" / "seedproxy"
LIMIT = 80


def long_functions() -> list[str]:
    found: list[str] = []
    for path in sorted(ROOT.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > LIMIT:
                    where = path.relative_to(ROOT.parent)
                    found.append(f"{where}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_no_function_over_80_lines() -> None:
    assert long_functions() == []
