"""The database's write lock (issue 21): how much of it the daemon takes while saves
come, and what another program's lock does to a save.

On a workspace with the default settings (the model on: the vectors follow the saves),
one client saves steadily (back to back, and one save every 10 ms), and meanwhile:

- --lock-runs runs of the plain `sqlite3` shell, `INSERT INTO memory_entries ...` with
  no busy timeout, spaced 100 ms apart: how many are refused because the daemon holds
  the write lock at that moment (goal: none);
- a probe that tries `BEGIN IMMEDIATE` with no timeout every 2 ms: the share of tries
  that find the lock taken, which is the daemon's duty cycle on the write lock (it grows
  with the saves: their rate is printed beside it);

then another program holds `BEGIN EXCLUSIVE` for --lock-hold seconds while the client
saves every 20 ms: the slowest of those saves, over the usual one (goal: at most 100 ms).

Run: python -m bench.lock_bench [--lock-runs 40] [--lock-hold 10] [--json]
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import statistics
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.common import Figure, at_most, daemon_on_socket, run_alone, scratch_workspace, stop
from oryxmem.client import Client

PROBE_EVERY_SECONDS = 0.002
# How long the client saves before the INSERTs begin: long enough for the steady state,
# and not a whole number of seconds, so that the first INSERT is not in step with the
# daemon's first mirror of the client's saves (a second after the first of them).
STEADY_SECONDS = 2.5
PACES = {"back to back": 0.0, "every 10 ms": 0.01}


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lock-runs", type=int, default=40, help="sqlite3 INSERTs per pace")
    parser.add_argument("--lock-hold", type=float, default=10.0, help="seconds of EXCLUSIVE")


def main(argv: list[str] | None = None) -> list[Figure]:
    return run_alone("write-lock benchmark", __doc__, options, run, argv)


@contextmanager
def saving(client: Client, pause: float, times: list[float] | None = None) -> Iterator[list[int]]:
    """One client saving in a thread at this pace until the block ends; gives the count
    of its saves so far (one item, updated as it goes)."""
    done = threading.Event()
    count = [0]

    def loop() -> None:
        while not done.is_set():
            started = time.perf_counter()
            client.save("steady", f"a steady save {count[0]}")
            if times is not None:
                times.append((time.perf_counter() - started) * 1000)
            count[0] += 1
            if pause:
                time.sleep(pause)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield count
    finally:
        done.set()
        thread.join(timeout=60)


def refused_inserts(db: Path, runs: int, tag: str) -> int:
    """How many of `runs` plain sqlite3 INSERTs (no busy timeout) fail as locked."""
    refused = 0
    for n in range(runs):
        sql = (
            "INSERT INTO memory_entries(agent, scope, content)"
            f" VALUES ('probe', 'archival', 'an insert by another program, {tag} {n}')"
        )
        done = subprocess.run(["sqlite3", str(db), sql], capture_output=True, text=True)
        if done.returncode != 0:
            if "locked" not in done.stderr and "busy" not in done.stderr:
                raise RuntimeError(f"sqlite3: {done.stderr}")
            refused += 1
        time.sleep(0.1)
    return refused


def duty_cycle(db: Path, seconds: float) -> float:
    """The share of BEGIN IMMEDIATE tries (no timeout) that find the write lock taken."""
    conn = sqlite3.connect(db, timeout=0, isolation_level=None)
    tries = taken = 0
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            tries += 1
            try:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("ROLLBACK")
            except sqlite3.OperationalError:
                taken += 1
            time.sleep(PROBE_EVERY_SECONDS)
    finally:
        conn.close()
    return taken / max(tries, 1)


def held_lock(db: Path, client: Client, seconds: float) -> tuple[float, float]:
    """The usual save, and the slowest while another program holds BEGIN EXCLUSIVE."""
    usual: list[float] = []
    with saving(client, 0.02, usual):
        time.sleep(2)
    during: list[float] = []
    other = sqlite3.connect(db, timeout=5, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        with saving(client, 0.02, during):
            time.sleep(seconds)
    finally:
        other.execute("ROLLBACK")
        other.close()
    return statistics.median(usual), max(during)


def run(args: argparse.Namespace) -> list[Figure]:
    if shutil.which("sqlite3") is None:
        raise RuntimeError("the sqlite3 shell is needed (apt-get install sqlite3)")
    figures: list[Figure] = []
    with scratch_workspace("oryxmem-lock-") as root:
        db = root / ".oryxos" / "oryxos.db"
        proc, sock = daemon_on_socket(root, "lock")
        try:
            client = Client(sock)
            client.save("steady", "the first save: the model loads")
            client.search("steady", "warm up the model")
            for pace, pause in PACES.items():
                with saving(client, pause) as saved:
                    time.sleep(STEADY_SECONDS)
                    before, began = saved[0], time.monotonic()
                    refused = refused_inserts(db, args.lock_runs, pace)
                    duty = duty_cycle(db, 3.0)
                    rate = (saved[0] - before) / (time.monotonic() - began)
                figures += [
                    Figure(
                        f"sqlite3 INSERTs refused of {args.lock_runs}, saves {pace}",
                        refused,
                        "",
                        at_most(0, 21),
                    ),
                    Figure(f"  daemon's write-lock duty cycle, saves {pace}", duty * 100, "%"),
                    Figure(f"  saves/s meanwhile, {pace}", rate, "/s"),
                ]
            usual, slowest = held_lock(db, client, args.lock_hold)
            figures.append(
                Figure(
                    f"slowest save under another's {args.lock_hold:.0f} s EXCLUSIVE, over usual",
                    slowest - usual,
                    "ms",
                    at_most(100, 21, "ms"),
                )
            )
            client.close()
        finally:
            stop(proc)
            sock.unlink(missing_ok=True)
    return figures


if __name__ == "__main__":
    main()
