"""The ``Exchange`` is the only writer of its fields: the stages hold it under a few
names (``ex``, ``exchange``, ``seated``, ``self.exchange``, ``self._ex``) and call its
methods; an assignment to one of its fields through those names anywhere else fails
here, so its docstring's first invariant stays true."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from seedproxy.pipeline.exchange import Exchange

SRC = Path(__file__).resolve().parents[2] / "src" / "seedproxy"
HOLDERS = {"ex", "exchange", "seated", "self.exchange", "self._ex", "self.ex"}


def _writes(tree: ast.AST, fields: set[str]) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            if (isinstance(target, ast.Attribute) and target.attr in fields
                    and ast.unparse(target.value) in HOLDERS):
                found.append((node.lineno, ast.unparse(target)))
    return found


def test_nothing_outside_the_exchange_writes_its_fields() -> None:
    fields = {f.name for f in dataclasses.fields(Exchange)}
    bad = []
    for path in sorted(SRC.rglob("*.py")):
        if path.name == "exchange.py" and path.parent.name == "pipeline":
            continue
        for line, target in _writes(ast.parse(path.read_text(encoding="utf-8")), fields):
            bad.append(f"{path.relative_to(SRC)}:{line}: {target}")
    assert not bad, "\n".join(bad)


def test_the_check_sees_a_write() -> None:
    fields = {f.name for f in dataclasses.fields(Exchange)}
    assert _writes(ast.parse("ex.status = 500\nself.exchange.upstream_s += 1.0"), fields) == [
        (1, "ex.status"), (2, "self.exchange.upstream_s")]
