"""Each stage's output is written only in its own file: the upstream call (``call.py``),
the recorder (``recorder.py``) and the observer (``observer.py``) assign their own
attributes; the stages hold them under a few names (``call``, ``recorder``,
``observer``, ``self.call``, ``self._recorder``...) and call their methods. An
assignment to one of their attributes through those names anywhere else fails here.
The request context is frozen: seating sets it once."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from seedproxy.pipeline.context import RequestContext

SRC = Path(__file__).resolve().parents[2] / "src" / "seedproxy"
PIPELINE = SRC / "pipeline"
OWNERS = {"call.py": ("UpstreamCall", "call"), "recorder.py": ("Recorder", "recorder"),
          "observer.py": ("Observer", "observer")}


def _stores(tree: ast.AST) -> list[tuple[int, ast.Attribute]]:
    return [(node.lineno, node) for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)]


def _fields(file: str, cls: str) -> set[str]:
    """The attributes ``cls`` assigns to ``self`` in ``file``."""
    tree = ast.parse((PIPELINE / file).read_text(encoding="utf-8"))
    owner = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls)
    return {node.attr for _, node in _stores(owner) if ast.unparse(node.value) == "self"}


def _holder(expr: ast.expr, name: str) -> bool:
    """``expr`` names a holder of the owner: ``call``, ``self.call``, ``x._call``..."""
    last = expr.attr if isinstance(expr, ast.Attribute) else getattr(expr, "id", None)
    return last in (name, f"_{name}")


def _writes(tree: ast.AST, fields: set[str], name: str) -> list[tuple[int, str]]:
    return [(line, ast.unparse(node)) for line, node in _stores(tree)
            if node.attr in fields and _holder(node.value, name)]


@pytest.mark.parametrize("owner", sorted(OWNERS))
def test_only_its_own_file_writes_a_stage_output(owner: str) -> None:
    cls, name = OWNERS[owner]
    fields = _fields(owner, cls)
    assert fields, f"{cls} assigns no attributes: the check would be empty"
    bad = []
    for path in sorted(SRC.rglob("*.py")):
        if path == PIPELINE / owner:
            continue
        for line, target in _writes(ast.parse(path.read_text(encoding="utf-8")), fields, name):
            bad.append(f"{path.relative_to(SRC)}:{line}: {target}")
    assert not bad, "\n".join(bad)


def test_the_check_sees_a_write() -> None:
    fields = _fields("recorder.py", "Recorder")
    tree = ast.parse("recorder.status = 500\nself._recorder.recording = True\nreply.status = 1")
    assert _writes(tree, fields, "recorder") == [
        (1, "recorder.status"), (2, "self._recorder.recording")]
    calls = _fields("call.py", "UpstreamCall")
    assert _writes(ast.parse("self.call.upstream_s += 1.0"), calls, "call") == [
        (1, "self.call.upstream_s")]


def test_the_request_context_is_frozen() -> None:
    params = RequestContext.__dataclass_params__  # type: ignore[attr-defined]
    assert params.frozen
    for path in sorted(SRC.rglob("*.py")):
        assert "object.__setattr__" not in path.read_text(encoding="utf-8"), path
    with pytest.raises(dataclasses.FrozenInstanceError):
        context = object.__new__(RequestContext)
        context.seeds = [1]  # type: ignore[misc]
