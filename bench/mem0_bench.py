"""The mem0 backend (issue 14): what it costs a save, and how soon mem0 and MEMORY.md
hear of each other.

Each workspace runs its daemon, a real process on a real socket:

- save p50 / p99 through the socket (one client, --mem0-saves saves) with the markdown
  backend and with the mem0 backend (embedded: a mem0.Memory with its Qdrant on disk),
  in the same run; the goal is the ratio. A save is answered once it is durable in
  MEMORY.md, and mem0 follows as the rows do. The mem0 saves are timed once the
  daemon's mem0 thread has made its first pass (it loads mem0 and opens its store:
  seconds of a core, once, after the daemon starts);
- a save and then a read of the agent's memory through the mem0 backend (it brings
  mem0 up to the rows first), p50;
- how long a memory another mem0 client adds takes to be in MEMORY.md (p50 / p99),
  through a mem0 server (the tests' loopback server over a real mem0.Memory) with
  mem0.poll_seconds = 1.

Run: python -m bench.mem0_bench [--mem0-saves 300] [--foreign 20]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
import urllib.request
from pathlib import Path

from bench.common import (
    Figure,
    at_most,
    daemon_on_socket,
    percentile,
    run_alone,
    scratch_workspace,
    stop,
)
from oryxmem.client import Client
from oryxmem.config import set_value


def wait_for_a_pass(client: Client, seconds: float = 120.0) -> None:
    """Until the daemon's mem0 thread has made a pass: the first loads mem0 and opens
    its store (seconds of a core), which the saves timed after it do not share."""
    deadline = time.monotonic() + seconds
    while not client.health()["mem0"]["passes"]:
        if time.monotonic() > deadline:
            raise RuntimeError("the daemon's mem0 thread made no pass")
        time.sleep(0.02)


def save_times(root: Path, saves: int, name: str) -> tuple[list[float], list[float], float]:
    """Save p50 samples, how long each of a few saves took to reach mem0, and the seconds
    from serving to the mem0 thread's first pass (if mem0)."""
    proc, sock = daemon_on_socket(root, name)
    serving = time.monotonic()
    client = Client(sock)
    try:
        for n in range(20):
            client.save("coder", f"warm up {n}")
        loaded = 0.0
        if name == "mem0":  # mem0 loaded (its store opened, its first pass made)
            wait_for_a_pass(client)
            loaded = time.monotonic() - serving
        times = []
        for n in range(saves):
            started = time.perf_counter()
            client.save("coder", f"saved {n}: the build of module {n % 17} passed")
            times.append((time.perf_counter() - started) * 1000)
        reach: list[float] = []
        if name == "mem0":
            time.sleep(2)
            for n in range(10):
                started = time.perf_counter()
                client.save("coder", f"reaches mem0 {n}")
                held = client.memory("coder")["archival"]  # read through mem0
                assert any(e["content"] == f"reaches mem0 {n}" for e in held)
                reach.append((time.perf_counter() - started) * 1000)
        return times, reach, loaded
    finally:
        client.close()
        stop(proc)


def foreign_delays(root: Path, count: int) -> list[float]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from support.mem0_server import mem0_server  # type: ignore[import-not-found]

    delays = []
    with mem0_server(root.parent / "mem0-server") as (url, _):
        for key, value in (
            ("memory.backend", "mem0"),
            ("mem0.transport", "http"),
            ("mem0.url", url),
        ):
            set_value(root / ".oryxos" / "config.toml", key, value)
        proc, sock = daemon_on_socket(root, "mem0-http")
        client = Client(sock)
        path = root / ".oryxos" / "agents" / "coder" / "MEMORY.md"
        try:
            client.save("coder", "the agent exists")
            for n in range(count):
                text = f"added by another mem0 client {n}"
                body = {"messages": [{"role": "user", "content": text}], "agent_id": "coder"}
                request = urllib.request.Request(
                    f"{url}/memories",
                    json.dumps(body).encode(),
                    {"Content-Type": "application/json"},
                )
                started = time.perf_counter()
                urllib.request.urlopen(request, timeout=30).close()
                while f"] {text}\n" not in path.read_text():
                    time.sleep(0.01)
                delays.append((time.perf_counter() - started) * 1000)
                time.sleep(random.random() * 0.5)
        finally:
            client.close()
            stop(proc)
    return delays


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mem0-saves", type=int, default=300, help="saves timed per backend")
    parser.add_argument("--foreign", type=int, default=20, help="memories another client adds")


def run(args: argparse.Namespace) -> list[Figure]:
    import importlib.util

    if importlib.util.find_spec("mem0") is None:
        print("mem0 benchmark: oryxmem[mem0] is not installed; skipped")
        return []
    with scratch_workspace("oryxmem-mem0-") as markdown_root:
        markdown, _, _ = save_times(markdown_root, args.mem0_saves, "markdown")
    with scratch_workspace("oryxmem-mem0-") as root:
        set_value(root / ".oryxos" / "config.toml", "memory.backend", "mem0")
        mem0, reach, loaded = save_times(root, args.mem0_saves, "mem0")
    with scratch_workspace("oryxmem-mem0-") as root:
        delays = foreign_delays(root, args.foreign)
    ratio = statistics.median(mem0) / statistics.median(markdown)
    return [
        Figure("save p50, markdown backend", statistics.median(markdown), "ms"),
        Figure("save p50, mem0 backend (embedded)", statistics.median(mem0), "ms"),
        Figure("  its p99", percentile(mem0, 0.99), "ms"),
        Figure("  mem0 / markdown", ratio, "x", at_most(2, 14, "x")),
        Figure("  (timed after mem0's first pass: serving to it)", loaded, "s"),
        Figure("a save, then a read through mem0, p50", statistics.median(reach), "ms"),
        Figure(
            "another client's memory in MEMORY.md p50",
            statistics.median(delays),
            "ms",
            at_most(2000, 14, "ms"),
        ),
        Figure("  its p99", percentile(delays, 0.99), "ms"),
    ]


def main(argv: list[str] | None = None) -> list[Figure]:
    return run_alone("mem0", __doc__, options, run, argv)


if __name__ == "__main__":
    main()
