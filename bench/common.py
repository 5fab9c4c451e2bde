"""Shared pieces of the benchmarks: timing, percentiles, the fsync floor, a table."""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from oryxmem.fileio import atomic_write


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
    target = folder / "floor.md"
    payload = b"- [2026-11-30 10:00:00] floor\n" * 10
    return statistics.median(time_calls(lambda: atomic_write(target, payload), repeat))


@dataclass
class Figure:
    name: str
    value: float
    unit: str
    goal: str = ""
    holds: bool | None = None

    def row(self) -> str:
        verdict = {None: "", True: "yes", False: "NO"}[self.holds]
        return f"{self.name:<52} {self.value:>10.3f} {self.unit:<6} {self.goal:<22} {verdict}"


def print_table(title: str, figures: list[Figure]) -> None:
    print(f"\n{title}")
    print(f"{'figure':<52} {'value':>10} {'unit':<6} {'goal':<22} holds")
    for figure in figures:
        print(figure.row())


def scratch_dir(prefix: str) -> tempfile.TemporaryDirectory[str]:
    base = os.environ.get("ORYXMEM_BENCH_DIR")  # a real disk, not tmpfs, for honest fsyncs
    return tempfile.TemporaryDirectory(prefix=prefix, dir=base)


def report(title: str, figures: list[Figure], as_json: bool) -> None:
    if as_json:
        import json

        print(json.dumps([figure.__dict__ for figure in figures], indent=2))
    else:
        print_table(title, figures)


def start_oryxmem(
    command: list[str], root: Path, log: Path, ready: bytes, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """`python -m oryxmem COMMAND` on a workspace, once its log says it is ready."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "oryxmem", *command],
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
        yield root
