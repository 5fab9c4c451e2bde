"""python -m bench: every benchmark in bench/, run several times, in one table.

Each figure is the median of --runs runs (their spread is shown), next to the goal
an issue set for it and whether the median holds. The runs are taken in rounds, every
benchmark once and then again, so that a benchmark's runs lie minutes apart: on a
shared machine whose pace drifts for minutes at a time, a slow spell then counts in
one run of a benchmark (and shows in the spread), not in all of them. Timings that
depend on the machine's disk come with their ratio to a floor measured in the same
run: one fsync'd atomic replace of a small file, and one SQLite commit (WAL, FULL).

Run: python -m bench [--runs 3] [--quick]
                    [--only store,sync,socket,lock,search,scale,recall,agents,cold,console,context,
                            episodes,digest,mem0,git]
                    [--json | --markdown]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time

from bench import (
    agents_bench,
    cold_bench,
    console_bench,
    context_quality,
    digest_bench,
    episodes_quality,
    git_bench,
    lock_bench,
    mem0_bench,
    recall_quality,
    scale_bench,
    search_bench,
    socket_bench,
    store_bench,
    sync_bench,
)
from bench.common import Figure, compile_oryxmem, merge_runs, print_markdown, print_table

BENCHMARKS = {
    "store": store_bench,
    "sync": sync_bench,
    "socket": socket_bench,
    "lock": lock_bench,
    "search": search_bench,
    "scale": scale_bench,
    "recall": recall_quality,
    "agents": agents_bench,
    "cold": cold_bench,
    "console": console_bench,
    "context": context_quality,
    "episodes": episodes_quality,
    "digest": digest_bench,
    "mem0": mem0_bench,
    "git": git_bench,
}
# Smaller sizes for a check that the benchmarks run (minutes, not tens of minutes);
# the goals were set for the full sizes.
QUICK = [
    "--sizes",
    "1000,10000",
    "--agents",
    "200",
    "--idle",
    "10",
    "--recall-entries",
    "10000",
    "--search-entries",
    "10000",
    "--sessions",
    "100",
    "--search-backlog",
    "1000",
    "--search-idle",
    "5",
    "--take-in",
    "2000",
    "--calls",
    "50",
    "--hooks",
    "5",
    "--lock-hold",
    "3",
    "--console-entries",
    "10000",
    "--git-entries",
    "10000",
    "--git-rounds",
    "3",
    "--scale-sizes",
    "10000,100000",
    "--scale-shared",
    "20000",
    "--scale-agents",
    "20",
]


def main(argv: list[str] | None = None) -> list[Figure]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3, help="runs per benchmark (median)")
    parser.add_argument("--quick", action="store_true", help="smaller sizes, shorter idle")
    parser.add_argument("--only", default=",".join(BENCHMARKS), help=",".join(BENCHMARKS))
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--markdown", action="store_true", help="the table as Markdown")
    for module in BENCHMARKS.values():
        module.options(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args = parser.parse_args([*QUICK, *(sys.argv[1:] if argv is None else argv)])
    compile_oryxmem()
    started = time.monotonic()
    names = args.only.split(",")
    runs: dict[str, list[list[Figure]]] = {name: [] for name in names}
    for _ in range(args.runs):  # in rounds: see the module's docstring
        for name in names:
            runs[name].append(BENCHMARKS[name].run(args))
    figures = [figure for name in names for figure in merge_runs(runs[name])]
    elapsed = time.monotonic() - started
    title = (
        f"oryxmem benchmarks: median of {args.runs} runs{' (quick sizes)' if args.quick else ''}"
        f" on {platform.node()}, {platform.python_implementation()} {platform.python_version()},"
        f" {elapsed:.0f} s"
    )
    if args.json:
        print(json.dumps({"title": title, "figures": [f.as_dict() for f in figures]}, indent=2))
    elif args.markdown:
        print(f"{title}\n")
        print_markdown(figures)
    else:
        print_table(title, figures)
        missed = [f.name for f in figures if f.holds is False]
        print(f"\n{len(missed)} goal(s) missed" + (": " + "; ".join(missed) if missed else ""))
    return figures


if __name__ == "__main__":
    main()
