"""Socket benchmark (issue 4): the daemon as a real process, clients as real processes.

Run: python -m bench.socket_bench [--saves 500] [--seconds 3] [--entries 100000] [--json]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.common import (
    Figure,
    fsync_replace_floor_ms,
    percentile,
    report,
    scratch_workspace,
    start_oryxmem,
    stop,
)
from oryxmem.client import Client
from oryxmem.store.format import render_entry_line
from oryxmem.workspace import Workspace

TS = "2026-11-30 10:00:00"


def start_daemon(root: Path, sock: Path) -> subprocess.Popen[bytes]:
    env = {"ORYXMEM_SOCKET": str(sock)}
    return start_oryxmem(["daemon"], root, root / "daemon.log", b"serving", env)


def _saver(
    sock: str, agent: str, seconds: float, start: float, counts: multiprocessing.Queue
) -> None:  # type: ignore[type-arg]
    client = Client(sock)
    while time.time() < start:
        time.sleep(0.001)
    done = 0
    while time.time() < start + seconds:
        client.save(agent, f"throughput {os.getpid()} {done}")
        done += 1
    counts.put(done)


def throughput(sock: Path, clients: int, seconds: float) -> float:
    counts: multiprocessing.Queue = multiprocessing.Queue()  # type: ignore[type-arg]
    start = time.time() + 1.0
    procs = [
        multiprocessing.Process(
            target=_saver, args=(str(sock), f"agent{n % 4}", seconds, start, counts)
        )
        for n in range(clients)
    ]
    for proc in procs:
        proc.start()
    total = sum(counts.get(timeout=seconds + 60) for _ in procs)
    for proc in procs:
        proc.join()
    return total / seconds


def seed(workspace: Workspace, agent: str, count: int) -> None:
    path = workspace.memory_path(agent)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [render_entry_line(TS, f"step {i} of a long history") for i in range(count)]
    path.write_text(
        "## 核心记忆\n- [2026-01-01 00:00:00] User is Ada.\n\n## 归档记忆\n"
        + "\n".join(lines)
        + "\n"
    )


def main(argv: list[str] | None = None) -> list[Figure]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--saves", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    figures: list[Figure] = []
    with scratch_workspace("oryxmem-socket-") as root:
        workspace = Workspace(root)
        seed(workspace, "big", args.entries)
        sock = Path(f"/tmp/oryxmem-bench-{os.getpid()}.sock")
        floor = fsync_replace_floor_ms(root)
        proc = start_daemon(root, sock)
        try:
            client = Client(sock)
            samples = []
            for i in range(args.saves):
                started = time.perf_counter()
                client.save("solo", f"one client save {i}")
                samples.append((time.perf_counter() - started) * 1000)
            p50, p99 = statistics.median(samples), percentile(samples, 0.99)
            figures += [
                Figure("fsync'd atomic replace (floor)", floor, "ms"),
                Figure("durable save p50, one client", p50, "ms", "<= 1.5 ms", p50 <= 1.5),
                Figure("durable save p99, one client", p99, "ms"),
                Figure("save p50 / floor", p50 / floor, "x", "<= 3x", p50 / floor <= 3),
            ]
            for clients in (1, 4, 16):
                rate = throughput(sock, clients, args.seconds)
                goal, holds = (">= 3000/s", rate >= 3000) if clients == 16 else ("", None)
                figures.append(
                    Figure(f"saves/s, {clients} clients over 4 agents", rate, "/s", goal, holds)
                )
            keywords = [f"step {i * 7919 % args.entries} of" for i in range(200)]
            client.recall("big", "warm up")
            recall = [0.0] * len(keywords)
            for i, keyword in enumerate(keywords):
                started = time.perf_counter()
                client.recall("big", keyword)
                recall[i] = (time.perf_counter() - started) * 1000
            p50 = statistics.median(recall)
            label = f"recall p50 at {args.entries} archival entries"
            figures.append(Figure(label, p50, "ms", "<= 3 ms", p50 <= 3))
            context = []
            for _ in range(200):
                started = time.perf_counter()
                client.context("big")
                context.append((time.perf_counter() - started) * 1000)
            p50 = statistics.median(context)
            figures.append(
                Figure(f"context p50 ({args.entries}-entry agent)", p50, "ms", "<= 2 ms", p50 <= 2)
            )
            cli = []
            for _ in range(5):
                started = time.perf_counter()
                subprocess.run(
                    [sys.executable, "-m", "oryxmem", "recall", "--agent", "big", "step 77 of"],
                    env={**os.environ, "ORYXMEM_ROOT": str(root), "ORYXMEM_SOCKET": str(sock)},
                    check=True,
                    capture_output=True,
                )
                cli.append((time.perf_counter() - started) * 1000)
            p50 = statistics.median(cli)
            figures.append(
                Figure(
                    "oryxmem recall, cold CLI via the daemon", p50, "ms", "<= 150 ms", p50 <= 150
                )
            )
            health = client.health()
            batches = max(health["save_batches"], 1)
            figures.append(Figure("saves per group commit (mean)", health["saves"] / batches, "x"))
            client.close()
        finally:
            stop(proc)
    report("socket benchmark", figures, args.json)
    return figures


if __name__ == "__main__":
    main()
