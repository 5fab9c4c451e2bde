"""Layers point down: every import in oryxmem/, at any depth of a module, goes to its own
floor or a lower one. Lazy imports (inside a function, for start-up time) count too, so
none can hide a cycle between packages."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "oryxmem"

# From the ground up. A module may import its own floor and the floors below it.
FLOORS: list[tuple[str, ...]] = [
    (
        "__init__",
        "errors",
        "clock",
        "settings",
        "registry",
        "fileio",
        "heap",
        "helper",
        "intmap",
        "config",
        "workspace",
        "signatures",
        "operations",
        "schemas",
        "openapi",
        "launch",
        "anchors",
        "secrets",
    ),
    ("embed",),
    ("store", "visible"),
    ("index",),
    ("backends", "search", "digest", "summarize", "prompt"),
    ("sync",),
    ("service", "payloads", "tools"),
    ("client", "reach"),
    ("daemon",),
    ("agents", "console"),
    ("cli", "__main__"),
]


def floor_of(module: str) -> int:
    """The floor of a module given as 'store.rows' or 'service'."""
    top = module.split(".")[0]
    for number, names in enumerate(FLOORS):
        if top in names:
            return number
    raise AssertionError(f"oryxmem.{module} is on no floor; add it to FLOORS")


def imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, module inside oryxmem) for every import anywhere in the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    here = path.relative_to(PACKAGE.parent).with_suffix("").parts
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = list(here[: len(here) - node.level])
                names = [".".join([*base, node.module] if node.module else base)]
            else:
                names = [node.module or ""]
            if names == ["oryxmem"]:  # from oryxmem import config, __version__
                names = [f"oryxmem.{_module_or_init(alias.name)}" for alias in node.names]
        else:
            continue
        found += [
            (node.lineno, name.removeprefix("oryxmem."))
            for name in names
            if name.startswith("oryxmem.")
        ]
    return found


def _module_or_init(name: str) -> str:
    is_module = (PACKAGE / name).is_dir() or (PACKAGE / f"{name}.py").exists()
    return name if is_module else "__init__"


def test_every_import_points_down() -> None:
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        mine = floor_of(module)
        for line, target in imports_of(path):
            if floor_of(target) > mine:
                wrong.append(f"oryxmem/{path.relative_to(PACKAGE)}:{line} imports oryxmem.{target}")
    assert wrong == []


def test_the_rules_the_issue_names_hold_and_the_check_can_fail(tmp_path: Path) -> None:
    """store imports neither sync, daemon nor the service; sync neither daemon nor the
    service. And the check above does catch an upward import."""
    assert floor_of("store.rows") < floor_of("sync.engine") < floor_of("service")
    assert floor_of("sync.watcher") < floor_of("daemon.worker")
    bad = tmp_path / "oryxmem" / "store" / "bad.py"
    bad.parent.mkdir(parents=True)
    bad.write_text("def f():\n    from oryxmem.sync.engine import SyncEngine\n")
    global PACKAGE
    real, PACKAGE = PACKAGE, tmp_path / "oryxmem"
    try:
        [(line, target)] = imports_of(bad)
    finally:
        PACKAGE = real
    assert (line, target) == (2, "sync.engine")
    assert floor_of(target) > floor_of("store.bad")
