"""The benchmarks are runnable: `python -m bench` takes every benchmark's options at once."""

from __future__ import annotations

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
