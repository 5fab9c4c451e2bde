"""Shared pieces of the benchmarks: timing, percentiles, the fsync floor, a table."""

from __future__ import annotations

import argparse
import fcntl
import os
import random
import signal
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from oryxmem.fileio import atomic_write
from oryxmem.launch import oryxmem_command


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def time_calls(call: Callable[[], object], repeat: int) -> list[float]:
    """Wall time of each call, in milliseconds."""
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def fsync_replace_floor_ms(folder: Path, repeat: int = 200) -> float:
    """p50 of one fsync'd atomic replace of a small file: the durable-write floor."""
    return statistics.median(fsync_replace_samples(folder, repeat))


def fsync_replace_samples(folder: Path, repeat: int) -> list[float]:
    """Milliseconds of each of ``repeat`` fsync'd atomic replaces of a small file."""
    target = folder / "floor.md"
    payload = b"- [2026-11-30 10:00:00] floor\n" * 10
    return time_calls(lambda: atomic_write(target, payload), repeat)


@dataclass(frozen=True)
class Goal:
    """A goal as an issue states it: value OP limit."""

    op: str  # "<=", ">=" or "<"
    limit: float
    issue: int
    unit: str = ""

    def holds(self, value: float) -> bool:
        if self.op == "<=":
            return value <= self.limit
        if self.op == ">=":
            return value >= self.limit
        return value < self.limit

    def __str__(self) -> str:
        return f"{self.op} {self.limit:g}{self.unit and ' ' + self.unit}"


def at_most(limit: float, issue: int, unit: str = "") -> Goal:
    return Goal("<=", limit, issue, unit)


def at_least(limit: float, issue: int, unit: str = "") -> Goal:
    return Goal(">=", limit, issue, unit)


def below(limit: float, issue: int, unit: str = "") -> Goal:
    return Goal("<", limit, issue, unit)


@dataclass
class Figure:
    """One measured figure; with several runs, value is their median."""

    name: str
    value: float
    unit: str
    goal: Goal | None = None
    runs: list[float] = field(default_factory=list)

    @property
    def holds(self) -> bool | None:
        return None if self.goal is None else self.goal.holds(self.value)

    def spread(self, dash: str) -> str:
        """min..max of the runs ('' for a single run)."""
        runs = self.runs
        return f"{number(min(runs))}{dash}{number(max(runs))}" if len(runs) > 1 else ""

    def goal_label(self) -> str:
        return f"{self.goal} (#{self.goal.issue})" if self.goal else ""

    def row(self) -> str:
        verdict = {None: "", True: "yes", False: "NO"}[self.holds]
        spread, goal = self.spread(".."), self.goal_label()
        return (
            f"{self.name:<50} {self.value:>10.3f} {self.unit:<4} {spread:<17} {goal:<22} {verdict}"
        )

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "value": self.value,
            "unit": self.unit,
            "runs": self.runs or [self.value],
            "goal": str(self.goal) if self.goal else None,
            "issue": self.goal.issue if self.goal else None,
            "holds": self.holds,
        }


def print_table(title: str, figures: list[Figure]) -> None:
    print(f"\n{title}")
    print(f"{'figure':<50} {'median':>10} {'unit':<4} {'runs min..max':<17} {'goal':<22} holds")
    for figure in figures:
        print(figure.row())


def number(value: float) -> str:
    """A figure as a person reads it: 1,750 not 1.75e+03; 0.0938 not 0.094."""
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def print_markdown(figures: list[Figure]) -> None:
    """The table as Markdown, for docs/performance.md."""
    print("| figure | median | runs | goal | holds |")
    print("|---|---|---|---|---|")
    for figure in figures:
        verdict = {None: "", True: "yes", False: "**no**"}[figure.holds]
        cells = [
            figure.name.strip(),
            f"{number(figure.value)} {figure.unit}",
            figure.spread("–"),
            figure.goal_label(),
            verdict,
        ]
        print(f"| {' | '.join(cells)} |")


def merge_runs(runs: list[list[Figure]]) -> list[Figure]:
    """The median of each figure over several runs, in the order of the first run."""
    merged: dict[str, Figure] = {}
    for figures in runs:
        for figure in figures:
            if figure.name not in merged:
                merged[figure.name] = Figure(figure.name, 0.0, figure.unit, figure.goal)
            merged[figure.name].runs.append(figure.value)
    for figure in merged.values():
        figure.value = statistics.median(figure.runs)
    return list(merged.values())


def sqlite_commit_floor_ms(folder: Path, repeat: int = 200) -> float:
    """p50 of one one-row commit in WAL mode with synchronous=FULL: the SQLite floor."""
    import sqlite3

    conn = sqlite3.connect(folder / "floor.db", isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("CREATE TABLE IF NOT EXISTS t (x TEXT)")

        def commit() -> None:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO t VALUES ('floor')")
            conn.execute("COMMIT")

        return statistics.median(time_calls(commit, repeat))
    finally:
        conn.close()


def scratch_dir(prefix: str) -> tempfile.TemporaryDirectory[str]:
    base = os.environ.get("ORYXMEM_BENCH_DIR")  # a real disk, not tmpfs, for honest fsyncs
    return tempfile.TemporaryDirectory(prefix=prefix, dir=base)


def cpu_seconds(pid: int) -> float:
    """User plus system CPU a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def compile_oryxmem() -> None:
    """Byte-compile the oryxmem under test, as pip does when it installs the wheel: the
    processes timed here then load bytecode as a user's do, also where
    PYTHONDONTWRITEBYTECODE is set (there every process would compile the source again,
    some 30 ms a command, and a figure would grow with the lines of code)."""
    import compileall

    import oryxmem

    compileall.compile_dir(Path(oryxmem.__file__).parent, quiet=1)


def run_alone(
    title: str,
    description: str | None,
    options: Callable[[argparse.ArgumentParser], None],
    run: Callable[[argparse.Namespace], list[Figure]],
    argv: list[str] | None,
) -> list[Figure]:
    """One benchmark module run by itself (python -m bench.<name>): its own table."""
    parser = argparse.ArgumentParser(description=description)
    options(parser)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    compile_oryxmem()
    figures = run(args)
    report(title, figures, args.json)
    return figures


def report(title: str, figures: list[Figure], as_json: bool) -> None:
    if as_json:
        import json

        print(json.dumps([figure.as_dict() for figure in figures], indent=2, ensure_ascii=False))
    else:
        print_table(title, figures)


def start_oryxmem(
    command: list[str], root: Path, log: Path, ready: bytes, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """`oryxmem COMMAND` on a workspace as hosts start it (launch.py: the installed package,
    or the one PYTHONPATH names, never the current folder's), once its log says it is
    ready."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            oryxmem_command(*command),
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "ORYXMEM_ROOT": str(root), **(env or {})},
        )
    deadline = time.monotonic() + 600
    while ready not in log.read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(log.read_text())
        time.sleep(0.01)
    return proc


def daemon_on_socket(root: Path, name: str) -> tuple[subprocess.Popen[bytes], Path]:
    """`oryxmem daemon` on a workspace, on a socket of its own under /tmp, once it serves."""
    sock = Path(f"/tmp/oryxmem-{name}-{random.randrange(1 << 30)}.sock")
    env = {"ORYXMEM_SOCKET": str(sock)}
    return start_oryxmem(["daemon"], root, root / "daemon.log", b"serving", env), sock


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)


@contextmanager
def scratch_workspace(prefix: str, name: str = "ws") -> Iterator[Path]:
    """A fresh, initialized workspace on a real disk, removed afterwards."""
    from oryxmem.config import default_config_text
    from oryxmem.workspace import init_workspace

    with scratch_dir(prefix) as folder:
        root = Path(folder) / name
        init_workspace(root, config_text=default_config_text())
        try:
            yield root
        finally:
            stop_daemon_of(root)


def stop_daemon_of(root: Path, patience: float = 60.0) -> None:
    """The daemon serving this workspace, if one does (a command started it in the
    background, daemon.autostart), stopped: it would wait an hour for its next call."""
    from oryxmem.workspace import Workspace

    path = Workspace(root).run_dir / "daemon.lock"
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        if _lock_free(fd):
            return
        pid = int(os.pread(fd, 64, 0).decode().strip())
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + patience
        while not _lock_free(fd) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        os.close(fd)


def _lock_free(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    fcntl.flock(fd, fcntl.LOCK_UN)
    return True
