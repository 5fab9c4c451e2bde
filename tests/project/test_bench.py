"""The benchmarks are runnable: `python -m bench` takes every benchmark's options at once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_python_m_bench_accepts_every_benchmarks_options_together() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "--only" in done.stdout and "--mem0-saves" in done.stdout


def test_the_runs_are_taken_in_rounds_and_each_figure_is_the_median_of_its_own() -> None:
    # Two stand-in benchmarks: each run records its turn and gives one figure, the
    # turn's number. In rounds, "a" runs at turns 0, 2, 4 and "b" at 1, 3, 5.
    script = """
import json
import bench.__main__ as main
from bench.common import Figure
turns = []
class Stand:
    def __init__(self, name): self.name = name
    def options(self, parser): pass
    def run(self, args):
        turns.append(self.name)
        return [Figure(self.name, float(len(turns) - 1), "")]
main.BENCHMARKS = {"a": Stand("a"), "b": Stand("b")}
main.compile_oryxmem = lambda: None
figures = main.main(["--runs", "3", "--only", "a,b", "--json"])
print(json.dumps([turns, [(f.name, f.value, f.runs) for f in figures]]))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr
    turns, figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert turns == ["a", "b", "a", "b", "a", "b"]
    assert figures == [["a", 2.0, [0.0, 2.0, 4.0]], ["b", 3.0, [1.0, 3.0, 5.0]]]
