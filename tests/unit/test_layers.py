"""The package's layers: every import goes down a layer, and no modules import each other
round a circle (``docs/internals.md``, "Layers"). Imports are read with :mod:`ast`, so
imports inside functions and under ``TYPE_CHECKING`` count as much as those at the top."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "flightplan"

LAYERS = [
    {"__init__", "__main__", "errors", "units", "canonical", "durable", "activity",
     "interrupts", "metrics", "corpus", "spec", "rundir", "transfer_time", "ids", "rows",
     "goodput", "campaign_goodput", "campaign_lock", "findings", "ledger_rows", "redact"},
    {"trial"},
    {"tasks", "integrations"},
    {"plan"},
    {"publish"},
    {"run"},
    {"close"},
    {"tracking"},
    {"cli"},
]
"""Lowest first: core, the worker's runtime, tasks and training-library integrations, the
plan stage, the writer of results/, the orchestrator, the close stage, MLflow, the CLI."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Every flightplan module or name ``path`` imports, resolved to absolute dotted names."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("flightplan"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] == "flightplan":
                found.add(target)
                found.update(f"{target}.{a.name}" for a in node.names)
    return found


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _resolve(target: str, modules: dict[str, Path]) -> str | None:
    """The module a dotted import name stands for (a name inside a module: that module)."""
    while target and target not in modules:
        target = target.rpartition(".")[0]
    return target or None


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        graph[name] = {m for t in _imports(path) if (m := _resolve(t, modules)) and m != name}
    return graph


def _top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _layer(top: str) -> int:
    for index, layer in enumerate(LAYERS):
        if top in layer:
            return index
    raise AssertionError(f"flightplan.{top} is in no layer: add it to LAYERS and to "
                         f"docs/internals.md")


def test_every_import_goes_down_a_layer_or_stays_in_its_package():
    graph = _graph()
    climbing = []
    for module, targets in graph.items():
        for target in targets:
            src, dst = _top(module), _top(target)
            if src != dst and _layer(dst) >= _layer(src) and not (
                    _layer(src) == 0 and _layer(dst) == 0):
                climbing.append(f"{module} -> {target}")
    assert not climbing, "imports that climb or go sideways:\n" + "\n".join(sorted(climbing))


def test_no_modules_import_each_other_round_a_circle():
    graph = _graph()
    cycles = []
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    counter = [0]

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                item = stack.pop()
                on_stack.discard(item)
                component.append(item)
                if item == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


@pytest.mark.parametrize("package", ["tasks", "integrations"])
def test_tasks_and_integrations_see_the_trial_and_nothing_of_the_runner(package):
    graph = _graph()
    offending = sorted(f"{m} -> {t}" for m, ts in graph.items() if _top(m) == package
                       for t in ts if _top(t) in {"run", "close", "publish", "tracking", "cli"})
    assert not offending, "\n".join(offending)
