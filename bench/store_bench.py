"""Store benchmark (issue 2): durable append, load and recall at 1,000 and 100,000 entries.

Run: python -m bench.store_bench [--sizes 1000,100000] [--json]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
import tracemalloc
from pathlib import Path

from bench.common import (
    Figure,
    at_most,
    fsync_replace_floor_ms,
    percentile,
    run_alone,
    scratch_workspace,
    sqlite_commit_floor_ms,
    time_calls,
)
from oryxmem.backends.sqlite import SqliteMemoryStore
from oryxmem.fileio import FileLock
from oryxmem.launch import oryxmem_command
from oryxmem.store.base import LongTermMemoryStore, StoreLimits
from oryxmem.store.db import connect, write_transaction
from oryxmem.store.format import ARCHIVAL, NewEntry, numbered, parse, render_entry_line
from oryxmem.store.indexdb import connect_index
from oryxmem.store.markdown import MarkdownMemoryStore
from oryxmem.store.rows import insert_rows
from oryxmem.workspace import Workspace

TS = "2026-11-30 10:00:00"
WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "mu",
    "记忆",
    "助手",
]


def content_for(i: int) -> str:
    words = " ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range(8))
    return f'trigger: user="step {i} {words}" reply="done {i}"'


def seed(workspace: Workspace, agent: str, count: int) -> None:
    """Write count archival entries to the file and the table directly (fast), then let
    one sync pass record that both sides agree, as any workspace in use would have."""
    path = workspace.memory_path(agent)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["## 核心记忆", "- [2026-01-01 00:00:00] User's name is Ada.", "", "## 归档记忆"]
    lines += [render_entry_line(TS, content_for(i)) for i in range(count)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    db = connect(workspace.db_path)
    entries = numbered(NewEntry(ARCHIVAL, TS, content_for(i)) for i in range(count))
    with write_transaction(db):
        insert_rows(db, agent, entries, "bench")
    db.close()
    sync(workspace)


def sync(workspace: Workspace) -> None:
    subprocess.run(
        oryxmem_command("sync"),
        env={**os.environ, "ORYXMEM_ROOT": str(workspace.root)},
        check=True,
        capture_output=True,
    )


def measure(count: int, repeat: int) -> list[Figure]:
    with scratch_workspace("oryxmem-bench-") as root:
        workspace = Workspace(root)
        floor = fsync_replace_floor_ms(root)
        sql_floor = sqlite_commit_floor_ms(root)
        agent = f"a{count}"
        seed(workspace, agent, count)
        limits = StoreLimits()
        markdown = MarkdownMemoryStore(
            workspace.memory_path(agent),
            FileLock(workspace.lock_path(agent)),
            clock=lambda: TS,
            limits=limits,
        )
        rows_db = connect(workspace.db_path)
        sqlite = SqliteMemoryStore(
            rows_db, connect_index(workspace.db_path), agent, clock=lambda: TS, limits=limits
        )
        first_load = time_calls(markdown.load, 1)[0]  # a cold parse of the whole file
        big = count > 1000
        figures = [
            Figure(f"[{count}] floor: fsync'd atomic replace", floor, "ms"),
            Figure(f"[{count}] floor: SQLite commit (WAL, FULL)", sql_floor, "ms"),
        ]
        stores: list[tuple[str, LongTermMemoryStore, float, str]] = [
            ("markdown", markdown, floor, "replace floor"),
            ("sqlite", sqlite, sql_floor, "commit floor"),
        ]
        for name, store, its_floor, floor_name in stores:
            saves = (f"bench save {i}" for i in range(repeat))
            samples = time_calls(lambda s=store, c=saves: s.append(next(c)), repeat)  # type: ignore[misc]
            p50, p99 = statistics.median(samples), percentile(samples, 0.99)
            figures += [
                Figure(
                    f"[{count}] {name} durable append p50",
                    p50,
                    "ms",
                    at_most(5, 2, "ms") if big else None,
                ),
                Figure(f"[{count}] {name} durable append p99", p99, "ms"),
                Figure(
                    f"[{count}] {name} append p50 / replace floor",
                    p50 / floor,
                    "x",
                    None if big else at_most(2, 2, "x"),
                ),
            ]
            if its_floor is not floor:
                figures.append(
                    Figure(f"[{count}] {name} append p50 / {floor_name}", p50 / its_floor, "x")
                )
        figures.append(Figure(f"[{count}] markdown first load (cold parse)", first_load, "ms"))
        held = parsed_held_mb(workspace.memory_path(agent))
        figures.append(Figure(f"[{count}] markdown parsed file held (objects)", held, "MB"))
        load = statistics.median(time_calls(markdown.load, repeat))
        goal = at_most(50, 2, "ms") if big else None
        figures.append(Figure(f"[{count}] markdown load() p50", load, "ms", goal))
        sqlite_load = statistics.median(time_calls(sqlite.load, repeat))
        figures.append(Figure(f"[{count}] sqlite load() p50", sqlite_load, "ms"))
        for name, store, _, _ in stores:
            keywords = iter([f"step {i * 37 % count} " for i in range(repeat)])
            samples = time_calls(lambda s=store, k=keywords: s.recall(next(k)), repeat)  # type: ignore[misc]
            goal = at_most(5, 2, "ms") if name == "sqlite" and big else None
            figures.append(
                Figure(f"[{count}] {name} recall p50", statistics.median(samples), "ms", goal)
            )
        # The saves above changed file and rows behind sync's back: a CLI recall now
        # parses the file. Once a sync has seen them (a running daemon does at once),
        # a large file's rows answer instead.
        unsynced = cold_cli_recall(workspace, agent)
        sync(workspace)
        cli = cold_cli_recall(workspace, agent)
        label = f"[{count}] oryxmem recall, cold CLI, no daemon"
        figures.append(Figure(label, cli, "ms", at_most(150, 2, "ms")))
        label = f"[{count}]   same, file changed since the last sync"
        figures.append(Figure(label, unsynced, "ms"))
        return figures


def parsed_held_mb(path: Path) -> float:
    """What a parsed file keeps (its Python objects, tracemalloc; the text read aside):
    a daemon keeps it for every agent it builds blocks for."""
    text = path.read_text(encoding="utf-8")
    tracemalloc.start()
    doc = parse(text)
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del doc
    return held / 2**20


def cold_cli_recall(workspace: Workspace, agent: str, repeat: int = 5) -> float:
    env = {**os.environ, "ORYXMEM_ROOT": str(workspace.root)}
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        subprocess.run(
            oryxmem_command("recall", "--agent", agent, "step 7 "),
            env=env,
            check=True,
            capture_output=True,
        )
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sizes", default="1000,100000", help="archival entries per agent")
    parser.add_argument("--repeat", type=int, default=200, help="samples per figure")


def run(args: argparse.Namespace) -> list[Figure]:
    figures: list[Figure] = []
    for count in (int(size) for size in args.sizes.split(",")):
        figures += measure(count, args.repeat)
    return figures


def main(argv: list[str] | None = None) -> list[Figure]:
    return run_alone("store benchmark", __doc__, options, run, argv)


if __name__ == "__main__":
    main()
