"""Scale benchmark (issue 21): the cost curve of one agent's memory, 10,000 to 1,000,000,
and of many agents sharing a workspace.

For each size in --scale-sizes, one agent's MEMORY.md holds that many archival entries
(search_bench's sentences: 6 to 16 words by Zipf's law over 20,000 word types), its
rows, keyword indexes and vectors built beforehand (random unit vectors written
straight into the index, as search_bench does: a search costs the same whatever they
point at). Then, through a real daemon on a real socket:

- cold start: from `oryxmem daemon` to its log saying it serves;
- the first search, which reads the agent's vectors into memory, and the first prompt
  with a query, which parses the agent's MEMORY.md and folds its digest;
- hybrid search p50 / p99 (the query's embedding included) and the prompt with a query;
- the daemon's RSS with the model loaded and the agent's vectors in memory.

Then the same at --scale-shared entries split evenly among --scale-agents agents, one
of them searched: its searches must not pay for the others' entries.

Recall quality is bench/recall_quality.py's (the dev set's conversations are small:
the same code scores them, from the same int8 codes; docs/search.md).

Run: python -m bench.scale_bench [--scale-sizes 10000,100000,1000000]
    [--scale-shared 100000] [--scale-agents 100] [--json]
"""

from __future__ import annotations

import argparse
import atexit
import random
import statistics
import time
from contextlib import ExitStack
from pathlib import Path

from bench.common import (
    Figure,
    Goal,
    at_most,
    daemon_on_socket,
    percentile,
    run_alone,
    scratch_workspace,
    stop,
)
from bench.search_bench import rss_mb, seed, sentences, zipf_words
from oryxmem.client import Client
from oryxmem.workspace import Workspace

# The goals issue 21 set, by size: search p50, prompt with a query p50, RSS, cold start.
GOALS: dict[int, dict[str, float | None]] = {
    100_000: {"search": 10.0, "prompt": 15.0, "rss": 250.0, "start": None},
    1_000_000: {"search": 40.0, "prompt": 50.0, "rss": 800.0, "start": 20.0},
}


def goal(size: int, what: str, unit: str) -> Goal | None:
    limit = GOALS.get(size, {}).get(what)
    return None if limit is None else at_most(limit, 21, unit)


# Each workspace (entries, agents), set up once per process and searched by every run
# (the set-up of a million entries takes minutes; the searches change nothing in it).
_SEEDED: dict[tuple[int, int], tuple[Path, float]] = {}
_SCRATCH = ExitStack()
atexit.register(_SCRATCH.close)


def seeded(size: int, agents: int) -> tuple[Path, float]:
    """The workspace of this size split among this many agents, and the seconds its
    set-up took. The agent searched is "big"; the others are named by their number."""
    if (size, agents) not in _SEEDED:
        root = _SCRATCH.enter_context(scratch_workspace(f"oryxmem-scale-{size}-"))
        began = time.monotonic()
        texts, each = sentences(size), size // agents
        names = ["big", *(f"agent{n:03d}" for n in range(1, agents))]
        seed(
            Workspace(root),
            {name: texts[n * each : (n + 1) * each] for n, name in enumerate(names)},
        )
        _SEEDED[size, agents] = (root, time.monotonic() - began)
    return _SEEDED[size, agents]


def one_size(size: int, agents: int = 1) -> list[Figure]:
    root, took = seeded(size, agents)
    began = time.monotonic()
    proc, sock = daemon_on_socket(root, "scale")
    started = time.monotonic() - began
    try:
        client = Client(sock)
        rng = random.Random(11)
        queries = [" ".join(zipf_words(rng, rng.randint(2, 6))) for _ in range(220)]
        began = time.monotonic()
        client.search("big", "the first search reads the vectors", 10)
        first = time.monotonic() - began
        for query in queries[:20]:
            client.search("big", query, 10)
        searches = []
        for query in queries[20:]:
            began = time.perf_counter()
            client.search("big", query, 10)
            searches.append((time.perf_counter() - began) * 1000)
        by_words = []  # the words arm alone: the queries' embeddings are not in its time
        for query in queries[20:]:
            began = time.perf_counter()
            client.search("big", query, 10, mode="keyword")
            by_words.append((time.perf_counter() - began) * 1000)
        began = time.monotonic()
        client.prompt("big", query="the first prompt reads the file")
        first_prompt = time.monotonic() - began
        prompts = []
        for query in queries[20:120]:
            began = time.perf_counter()
            client.prompt("big", query=query)
            prompts.append((time.perf_counter() - began) * 1000)
        rss = rss_mb(proc.pid)
        client.close()
    finally:
        stop(proc)
        sock.unlink(missing_ok=True)
    median = statistics.median
    at = f"at {size:,} in {agents} agents" if agents > 1 else f"at {size:,}"
    searched = [
        Figure(f"  hybrid search p50 {at}", median(searches), "ms", goal(size, "search", "ms")),
        Figure(f"  hybrid search p99 {at}", percentile(searches, 0.99), "ms"),
        Figure(f"  search by words p50 {at}", median(by_words), "ms"),
        Figure(f"  search by words p99 {at}", percentile(by_words, 0.99), "ms"),
    ]
    prompt = Figure(
        f"  prompt with a query p50 {at}", median(prompts), "ms", goal(size, "prompt", "ms")
    )
    if agents > 1:
        setup = f"{agents} agents of {size // agents:,}: one searched; set up"
        return [Figure(setup, took, "s"), *searched, prompt]
    return [
        Figure(f"scale {at}: set up beforehand (rows, indexes, vectors)", took, "s"),
        Figure(f"  cold start to serving {at}", started, "s", goal(size, "start", "s")),
        Figure(f"  first search (reads the vectors) {at}", first, "s"),
        *searched,
        Figure(f"  first prompt with a query (parses MEMORY.md) {at}", first_prompt, "s"),
        prompt,
        Figure(f"  daemon RSS, model and vectors loaded, {at}", rss, "MB", goal(size, "rss", "MB")),
    ]


def run(args: argparse.Namespace) -> list[Figure]:
    figures: list[Figure] = []
    for size in (int(s) for s in args.scale_sizes.split(",") if s):
        figures += one_size(size)
    if args.scale_shared and args.scale_agents > 1:
        figures += one_size(args.scale_shared, args.scale_agents)
    return figures


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--scale-sizes", default="10000,100000,1000000", help="entries of one agent, each run"
    )
    parser.add_argument(
        "--scale-shared", type=int, default=100_000, help="entries of many agents (0: none)"
    )
    parser.add_argument("--scale-agents", type=int, default=100, help="the agents that share them")


def main(argv: list[str] | None = None) -> list[Figure]:
    return run_alone("scale benchmark", __doc__, options, run, argv)


if __name__ == "__main__":
    main()
