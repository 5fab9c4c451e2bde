"""Sync benchmark (issue 3): both directions' latency, cold start, unchanged restart, idle cost.

Run: python -m bench.sync_bench [--agents 1000] [--entries 100] [--samples 100] [--idle 60] [--json]

The watcher runs as a real process (`oryxmem sync --watch`); edits and inserts
come from this process, as an editor and another program would make them.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import subprocess
import time
from pathlib import Path

from bench.common import (
    Figure,
    at_most,
    below,
    cpu_seconds,
    percentile,
    run_alone,
    scratch_workspace,
    start_oryxmem,
    stop,
)
from oryxmem.store.format import render_entry_line
from oryxmem.workspace import Workspace

TS = "2026-11-30 10:00:00"


def start_watcher(root: Path, log: Path) -> subprocess.Popen[bytes]:
    return start_oryxmem(["sync", "--watch"], root, log, b"watching")


def wait_for(condition: object, timeout: float = 10.0) -> float:
    started = time.perf_counter()
    while not condition():  # type: ignore[operator]
        if time.perf_counter() - started > timeout:
            raise TimeoutError("the change never arrived")
        time.sleep(0.0005)
    return (time.perf_counter() - started) * 1000


def latency(root: Path, samples: int) -> list[Figure]:
    workspace = Workspace(root)
    path = workspace.memory_path("bench")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "## 归档记忆\n" + "".join(render_entry_line(TS, f"seed {i}") + "\n" for i in range(100))
    )
    proc = start_watcher(root, root / "watch.log")
    conn = sqlite3.connect(workspace.db_path, timeout=30)
    try:
        wait_for(lambda: conn.execute("SELECT count(*) FROM memory_entries").fetchone()[0] >= 100)
        file_to_row = []
        for i in range(samples):
            content = f"typed in an editor {i}"
            with open(path, "a", encoding="utf-8") as handle:
                handle.write(render_entry_line(TS, content) + "\n")
            query = "SELECT 1 FROM memory_entries WHERE content = ?"
            file_to_row.append(wait_for(lambda c=content, q=query: conn.execute(q, [c]).fetchone()))
            time.sleep(0.02)
        row_to_file = []
        for i in range(samples):
            content = f"inserted by another program {i}"
            with conn:
                conn.execute(
                    "INSERT INTO memory_entries(agent, content) VALUES ('bench', ?)", [content]
                )
            needle = content.encode()
            row_to_file.append(wait_for(lambda n=needle: n in path.read_bytes()))
            time.sleep(0.02)
        shell_to_file = []  # a program that writes and exits (its WAL closed): seen at once
        for i in range(max(samples // 5, 5)):
            content = f"inserted by the sqlite3 shell {i}"
            statement = f"INSERT INTO memory_entries(agent, content) VALUES ('bench', '{content}')"
            started = time.perf_counter()
            subprocess.run(["sqlite3", str(workspace.db_path), statement], check=True)
            needle = content.encode()
            wait_for(lambda n=needle: n in path.read_bytes())
            shell_to_file.append((time.perf_counter() - started) * 1000)
            time.sleep(0.02)
    finally:
        conn.close()
        stop(proc)
    figures = []
    for name, samples_ms in (
        ("file edit -> row visible", file_to_row),
        ("row inserted -> line in MEMORY.md", row_to_file),
        ("  by the sqlite3 shell (its run included)", shell_to_file),
    ):
        p50, p99 = statistics.median(samples_ms), percentile(samples_ms, 0.99)
        figures.append(Figure(f"{name} p50", p50, "ms", at_most(100, 3, "ms")))
        figures.append(Figure(f"{name} p99", p99, "ms", at_most(500, 3, "ms")))
    return figures


def seed_agents(workspace: Workspace, agents: int, entries: int) -> None:
    for a in range(agents):
        path = workspace.memory_path(f"agent{a:04d}")
        path.parent.mkdir(parents=True)
        lines = [render_entry_line(TS, f"agent {a} fact {i}") for i in range(entries)]
        path.write_text("## 核心记忆\n\n## 归档记忆\n" + "\n".join(lines) + "\n")


def timed_start(root: Path, log: Path) -> tuple[float, subprocess.Popen[bytes]]:
    """Seconds from launching the watcher until it reports ready (catch-up done)."""
    started = time.perf_counter()
    proc = start_watcher(root, log)
    return time.perf_counter() - started, proc


def idle_cost(proc: subprocess.Popen[bytes], seconds: float) -> tuple[float, float]:
    """CPU percent and RSS (MB) of a watcher left alone for `seconds`."""
    time.sleep(2)  # let start-up settle
    before, started = cpu_seconds(proc.pid), time.monotonic()
    time.sleep(seconds)
    used = cpu_seconds(proc.pid) - before
    elapsed = time.monotonic() - started
    status = Path(f"/proc/{proc.pid}/status").read_text()
    rss_kb = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS"))
    return used / elapsed * 100, rss_kb / 1024


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--agents", type=int, default=1000, help="agents for the cold start")
    parser.add_argument("--entries", type=int, default=100, help="entries per agent there")
    parser.add_argument("--samples", type=int, default=100, help="edits and inserts timed")
    parser.add_argument("--idle", type=float, default=60.0, help="seconds of idle measured")


def main(argv: list[str] | None = None) -> list[Figure]:
    return run_alone("sync benchmark", __doc__, options, run, argv)


def run(args: argparse.Namespace) -> list[Figure]:
    figures: list[Figure] = []
    with scratch_workspace("oryxmem-sync-") as root:
        figures += latency(root, args.samples)
    with scratch_workspace("oryxmem-sync-") as root:
        seed_agents(Workspace(root), args.agents, args.entries)
        label = f"{args.agents} agents x {args.entries} entries"
        cold, proc = timed_start(root, root / "cold.log")
        stop(proc)
        figures.append(Figure(f"cold start, {label}", cold, "s", at_most(15, 3, "s")))
        warm, proc = timed_start(root, root / "warm.log")
        figures.append(Figure("restart with nothing changed", warm, "s", at_most(2, 3, "s")))
        try:
            cpu, rss = idle_cost(proc, args.idle)
        finally:
            stop(proc)
        figures.append(
            Figure(f"idle watcher CPU over {args.idle:.0f} s", cpu, "%", below(1, 3, "%"))
        )
        figures.append(Figure("idle watcher RSS", rss, "MB", at_most(60, 3, "MB")))
    return figures


if __name__ == "__main__":
    main()
