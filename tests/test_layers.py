"""seedproxy's modules import one another without cycles, and its layers one way only.

Read from the source with ``ast``: module-level imports and those under
``if TYPE_CHECKING:`` count (a type-only cycle is still a cycle a reader has to untangle,
and becomes a real one the day the import is needed at run time); imports inside
functions do not. ``from pkg import name`` is an edge to ``pkg.name`` when that is a
module, else to ``pkg``.

Layers, lowest first, one entry per top-level module or package in ``ALLOWED``: the
shared leaf modules (``seeds``, ``errors``, ``settings`` ...); ``sessions``; the upstream side
(``wire``, ``transport``, ``media``, ``tito``, ``dialects``, ``bridges``, ``fleet``);
``pipeline``;
``proxy``; ``commands``. The engine is an upstream like any other: it imports only the leaf
modules. The client package imports nothing of the server but ``trajectory`` (the
exported JSON's fields). A new package fails the test
until it is given its place."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "src" / "seedproxy"
PACKAGE = "seedproxy"

LEAVES = frozenset({"errors", "nesting", "json_body", "sse_frames", "tool_choice",
                    "template_input", "settings", "detokenize", "stop_strings",
                    "sampling_fields", "legacy_tag", "error_presenters",
                    "trajectory"})
"""The rules the engine shares with the proxy (and the error table's presenters, and
the exported JSON's fields): they import only one another."""

UPSTREAM_SIDE = frozenset({"wire", "transport", "media", "tito", "dialects", "bridges",
                           "fleet"})

ALLOWED: dict[str, frozenset[str]] = {
    "seeds": frozenset(),
    "errors": frozenset(),
    "trajectory": frozenset(),
    "nesting": frozenset(),
    "sse_frames": frozenset({"errors"}),
    "detokenize": frozenset(),
    "stop_strings": frozenset(),
    "legacy_tag": frozenset(),
    "json_body": frozenset({"errors"}),
    "sampling_fields": frozenset({"errors", "legacy_tag"}),
    "error_presenters": frozenset({"errors", "sse_frames"}),
    "tool_choice": frozenset({"nesting"}),
    "template_input": frozenset({"errors", "nesting"}),
    "settings": frozenset({"errors"}),
    "sessions": LEAVES | {"seeds"},
    "wire": LEAVES | {"sessions"},
    "transport": LEAVES,
    "media": LEAVES | {"wire"},
    "tito": LEAVES | {"sessions", "wire", "media"},
    "dialects": LEAVES | {"seeds", "sessions", "wire", "tito"},
    "bridges": LEAVES | {"wire"},
    "fleet": LEAVES | {"sessions", "wire", "transport", "dialects"},
    "engine": LEAVES,
    "pipeline": LEAVES | {"seeds", "sessions"} | UPSTREAM_SIDE,
    "proxy": LEAVES | {"seeds", "sessions", "pipeline"} | UPSTREAM_SIDE,
    "client": frozenset({"trajectory"}),
    "commands": LEAVES | {"seeds", "sessions", "pipeline", "proxy", "engine", "client",
                          "__root__"} | UPSTREAM_SIDE,
    "__main__": frozenset({"commands"}),
    "__root__": frozenset({"seeds"}),
}
"""What each top-level module or package (``__root__``: ``seedproxy`` itself) may import."""


def module_names() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _top_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Imports run when the module loads (any ``if``/``try`` at module level included,
    ``if TYPE_CHECKING:`` too), not those inside functions or classes."""
    found: list[ast.Import | ast.ImportFrom] = []

    def walk(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found.append(node)
            elif isinstance(node, ast.If):
                walk(node.body)
                walk(node.orelse)
            elif isinstance(node, ast.Try):
                walk(node.body)
                for handler in node.handlers:
                    walk(handler.body)
                walk(node.orelse)
                walk(node.finalbody)
            elif isinstance(node, (ast.With, ast.AsyncWith)):
                walk(node.body)

    walk(tree.body)
    return found


def imports_of(name: str, path: Path, modules: dict[str, Path], *,
               everywhere: bool = False) -> set[str]:
    """The seedproxy modules ``name`` imports (with ``everywhere``, inside functions too)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    edges: set[str] = set()
    nodes = ([n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
             if everywhere else _top_level_imports(tree))
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == PACKAGE or alias.name.startswith(PACKAGE + "."):
                    edges.add(alias.name)
            continue
        if node.level:
            base = package.split(".")
            base = base[: len(base) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        if not (target == PACKAGE or target.startswith(PACKAGE + ".")):
            continue
        for alias in node.names:
            sub = f"{target}.{alias.name}"
            edges.add(sub if sub in modules else target)
    edges.discard(name)
    return {e for e in edges if e in modules}


def graph(*, everywhere: bool = False) -> dict[str, set[str]]:
    modules = module_names()
    return {name: imports_of(name, path, modules, everywhere=everywhere)
            for name, path in modules.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each as
    one cycle through it."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = [0]

    def connect(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            connect(v)
    return [_one_cycle(component, edges) for component in components]


def _one_cycle(component: list[str], edges: dict[str, set[str]]) -> list[str]:
    """A path ``a -> ... -> a`` inside ``component``, for the message."""
    members = set(component)
    start = component[0]
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(edges[v] & members):
                if w == start:
                    return paths[v] + [start]
                if w not in paths:
                    paths[w] = paths[v] + [w]
                    nxt.append(w)
        frontier = nxt
    return component


def test_the_graph_is_read() -> None:
    edges = graph()
    assert "seedproxy.proxy.app" in edges and "seedproxy.fleet.board" in edges
    assert "seedproxy.fleet.board" in edges["seedproxy.proxy.app"]


def test_the_cycle_finder_finds_a_cycle() -> None:
    found = cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}})
    assert found == [["a", "b", "c", "a"]]


def test_no_module_imports_itself_through_others() -> None:
    found = cycles(graph())
    message = "\n".join(" -> ".join(cycle) for cycle in found)
    print(message)
    assert not found, f"import cycles:\n{message}"


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__root__"


def test_seeds_imports_no_other_seedproxy_module() -> None:
    edges = graph()
    seeds = [m for m in edges if _layer(m) == "seeds"]
    assert seeds
    bad = {m: sorted(edges[m]) for m in seeds if edges[m] - set(seeds)}
    assert not bad, bad


def test_every_package_has_its_place_in_the_layers() -> None:
    placed = {_layer(m) for m in graph()}
    assert placed - set(ALLOWED) == set(), "give each new package its entry in ALLOWED"
    assert set(ALLOWED) - placed == set(), "ALLOWED names a package that is gone"


def test_the_layers_import_one_way() -> None:
    edges = graph(everywhere=True)
    bad = []
    for module, targets in sorted(edges.items()):
        layer = _layer(module)
        for target in sorted(targets):
            other = _layer(target)
            if other != layer and other not in ALLOWED.get(layer, frozenset()):
                bad.append(f"{module} -> {target}")
    print("\n".join(bad))
    assert not bad, "layer violations:\n" + "\n".join(bad)


def test_the_allowed_imports_have_no_cycle() -> None:
    edges = {layer: set(allowed) for layer, allowed in ALLOWED.items()}
    assert cycles(edges) == []


def test_the_fleet_boards_do_not_import_each_other() -> None:
    """``open_board`` picks the Redis board, so ``board`` may import ``redis_board``
    (lazily); the Redis board takes the shared state from ``fleet.state``, never from
    ``board``: no cycle, not even through an import inside a function."""
    edges = graph(everywhere=True)
    assert "seedproxy.fleet.board" not in edges["seedproxy.fleet.redis_board"]
    found = [c for c in cycles(edges) if "seedproxy.fleet.board" in c]
    assert not found, found
