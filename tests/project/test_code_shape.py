"""The shape of the code: small modules, small classes, plain functions, no import cycle.

The limits are the house's (issue 22): no module over 600 lines, no class over 400, no
function over cyclomatic complexity 15 as radon counts it, and no cycle between modules,
imports inside functions included (``if TYPE_CHECKING:`` imports aside: they never run).
"""

from __future__ import annotations

import ast
from pathlib import Path

import grimp
from radon.complexity import cc_visit

PACKAGE = Path(__file__).resolve().parents[2] / "oryxmem"
MAX_MODULE_LINES = 600
MAX_CLASS_LINES = 400
MAX_COMPLEXITY = 15


def sources() -> list[tuple[Path, str]]:
    return [(path, path.read_text(encoding="utf-8")) for path in sorted(PACKAGE.rglob("*.py"))]


def test_no_module_is_over_its_size() -> None:
    long = {
        str(path.relative_to(PACKAGE)): text.count("\n")
        for path, text in sources()
        if text.count("\n") > MAX_MODULE_LINES
    }
    assert long == {}


def test_no_class_is_over_its_size() -> None:
    long = {}
    for path, text in sources():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_CLASS_LINES:
                    long[f"{path.relative_to(PACKAGE)}:{node.name}"] = lines
    assert long == {}


def test_no_function_is_over_its_complexity() -> None:
    tangled = {}
    for path, text in sources():
        for block in cc_visit(text):
            if block.complexity > MAX_COMPLEXITY:
                tangled[f"{path.relative_to(PACKAGE)}:{block.fullname}"] = block.complexity
    assert tangled == {}


def test_no_import_cycle_between_modules() -> None:
    graph = grimp.build_graph("oryxmem", exclude_type_checking_imports=True)
    cycles = [sorted(group) for group in strongly_connected(graph) if len(group) > 1]
    assert cycles == []


def strongly_connected(graph: grimp.ImportGraph) -> list[set[str]]:
    """Tarjan's components of the module graph, without recursion."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    imported = sorted(graph.find_modules_directly_imported_by(child))
                    work.append((child, iter(imported)))
                elif child in on_stack:
                    low[module] = min(low[module], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[module])
            if low[module] == index[module]:
                group = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.add(member)
                    if member == module:
                        break
                groups.append(group)
    return groups


def test_a_cycle_is_found_when_there_is_one() -> None:
    """The finder itself: two modules importing each other are one group."""
    graph = grimp.ImportGraph()
    for name in ("a", "a.x", "a.y", "a.z"):
        graph.add_module(name)
    graph.add_import(importer="a.x", imported="a.y")
    graph.add_import(importer="a.y", imported="a.x")
    graph.add_import(importer="a.z", imported="a.x")
    groups = [group for group in strongly_connected(graph) if len(group) > 1]
    assert groups == [{"a.x", "a.y"}]
