"""adakit's own import graph: no cycle, and imports only run down the pipeline.

The graph is read from the source with ``ast``: module-level imports and those inside
functions (including ``TYPE_CHECKING`` blocks) alike, since a deferred import is still a
dependency a reader must hold in mind.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "adakit"

#: The layers from the ground floor up; a module may import its own layer or any below it.
#: ``judging`` sits under ``study``: the pipeline's judge stage, the cost plan of a judging pass
#: and the shipped datasets all read the judges, while the judges need only the apparatus.
LAYERS: list[tuple[str, ...]] = [
    ("config", "text", "locks"),
    ("record", "store", "figures", "render", "uncertainty", "synthetic"),
    ("llm",),
    ("apparatus",),
    ("judging",),
    ("study",),
    ("lenses",),
    ("variance", "diagnostics", "importers"),
    ("workbench",),
    ("cli", "__main__"),
]


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def import_graph() -> dict[str, set[str]]:
    """Each adakit module -> the adakit modules it imports (anywhere in its source)."""
    mods = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                targets = [f"{module}.{a.name}" for a in node.names] + [module]
            for target in targets:
                while target and target not in mods:
                    target = target.rpartition(".")[0]
                if target and target != name and target != "adakit":
                    deps.add(target)
        graph[name] = deps
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return stack[stack.index(dep):] + [dep]
            if dep not in state and (found := visit(dep)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def _layer(module: str) -> int:
    head = module.split(".")[1] if module.count(".") else ""
    for rank, names in enumerate(LAYERS):
        if head in names:
            return rank
    raise AssertionError(f"{module} belongs to no layer of tests/test_layers.py: place it")


def test_the_graph_is_read_from_the_source():
    graph = import_graph()
    assert "adakit.apparatus.agent" in graph
    assert "adakit.record" in graph["adakit.apparatus.agent"]
    assert "adakit.apparatus.tools" in graph["adakit.apparatus.agent"]


def test_no_import_cycle():
    cycle = _cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_imports_run_down_the_pipeline():
    graph = import_graph()
    upward = sorted(
        f"{mod} -> {dep}"
        for mod, deps in graph.items() if mod != "adakit"
        for dep in deps if _layer(dep) > _layer(mod)
    )
    assert not upward, "imports up the pipeline:\n" + "\n".join(upward)


def test_every_module_has_a_layer():
    for module in import_graph():
        if module != "adakit":
            _layer(module)


@pytest.mark.parametrize("graph,expected", [
    ({"a": {"b"}, "b": {"a"}}, ["a", "b", "a"]),
    ({"a": {"b"}, "b": {"c"}, "c": set()}, None),
])
def test_cycle_finder(graph, expected):
    assert _cycle(graph) == expected
