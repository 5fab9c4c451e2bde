"""Cold commands (issue 20): the wall time of a whole `oryxmem` process, as a person or a
script runs it.

On a workspace whose agent holds --cold-entries archival entries:

- with no daemon (and none started): show, context, save, agents, status;
- recall and search with daemon.autostart on: the first call (no daemon: it answers by
  itself and starts one), then the calls after it, which the daemon it started answers.

Each figure is the p50 of --cold-runs processes.

Run: python -m bench.cold_bench [--cold-entries 1000] [--cold-runs 15]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

from bench.common import Figure, at_most, percentile, run_alone, scratch_workspace
from oryxmem.launch import oryxmem_command
from oryxmem.store.format import render_entry_line

TS = "2026-11-01 09:00:00"
WITHOUT_DAEMON = {
    "show": ["show", "--agent", "coder"],
    "context": ["context", "--agent", "coder"],
    "save": ["save", "--agent", "coder", "a cold save"],
    "agents": ["agents"],
    "status": ["status"],
}
NEEDING_THE_MODEL = {
    "recall": ["recall", "--agent", "coder", "editor"],
    "search": ["search", "--agent", "coder", "which editor does the user like"],
}


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cold-entries", type=int, default=1000, help="entries of the agent")
    parser.add_argument("--cold-runs", type=int, default=15, help="processes timed per command")


def seed(root: Path, count: int) -> None:
    path = root / ".oryxos" / "agents" / "coder" / "MEMORY.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    topics = ["deploy", "tests", "the user's editor", "release notes", "the CI", "tea"]
    lines = [render_entry_line(TS, f"note {i} about {topics[i % 6]}") for i in range(count)]
    core = "## 核心记忆\n- [2026-01-01 00:00:00] User is Ada.\n\n"
    path.write_text(core + "## 归档记忆\n" + "\n".join(lines) + "\n")


def timed(command: list[str], env: dict[str, str]) -> float:
    """Milliseconds of one whole process (it must succeed)."""
    started = time.perf_counter()
    done = subprocess.run(oryxmem_command(*command), env=env, capture_output=True, timeout=300)
    took = (time.perf_counter() - started) * 1000
    if done.returncode != 0:
        raise RuntimeError(f"oryxmem {' '.join(command)}: {done.stderr.decode()}")
    return took


def status(env: dict[str, str]) -> dict[str, object]:
    done = subprocess.run(oryxmem_command("status", "--json"), env=env, capture_output=True)
    return dict(json.loads(done.stdout)) if done.returncode == 0 else {}


def run(args: argparse.Namespace) -> list[Figure]:
    figures = []
    with scratch_workspace("oryxmem-cold-") as root:
        seed(root, args.cold_entries)
        sock = f"/tmp/oryxmem-cold-{random.randrange(1 << 30)}.sock"
        env = {**os.environ, "ORYXMEM_ROOT": str(root), "ORYXMEM_SOCKET": sock}
        off = {**env, "ORYXMEM_AUTOSTART": "0"}
        subprocess.run(oryxmem_command("sync"), env=off, check=True)
        where = f"{args.cold_entries} entries, no daemon"
        for name, command in WITHOUT_DAEMON.items():
            samples = [timed(command, off) for _ in range(args.cold_runs)]
            figures.append(
                Figure(f"{name} p50 ({where})", percentile(samples, 0.5), "ms", at_most(150, 20))
            )
        on = {**env, "ORYXMEM_AUTOSTART": "1", "CI": ""}
        first = timed(NEEDING_THE_MODEL["recall"], on)
        figures.append(Figure("recall, first call (no daemon: it starts one)", first, "ms"))
        deadline = time.monotonic() + 120
        while status(on).get("status") != "ok":
            if time.monotonic() > deadline:
                raise RuntimeError("the daemon a recall started never served")
            time.sleep(0.1)
        try:
            for name, command in NEEDING_THE_MODEL.items():
                timed(command, on)  # the daemon's first: its model and vectors load
                samples = [timed(command, on) for _ in range(args.cold_runs)]
                figures.append(
                    Figure(
                        f"{name} p50 after the first call (the daemon it started)",
                        percentile(samples, 0.5),
                        "ms",
                        at_most(150, 20),
                    )
                )
        finally:
            pid = status(on).get("pid")
            if isinstance(pid, int):
                os.kill(pid, signal.SIGTERM)
    return figures


def main(argv: list[str] | None = None) -> list[Figure]:
    return run_alone("cold commands", __doc__, options, run, argv)


if __name__ == "__main__":
    main()
