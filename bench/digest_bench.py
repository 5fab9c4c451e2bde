"""The digest (issue 12): how many distinct entries the 4000-character archival part
stands for on a footprint-heavy agent, against today's newest-entries cut.

The agent holds --footprints automatic footprints (``trigger: user="..." reply="..."``)
of REQUESTS kinds of request, drawn by Zipf's law, each reply with its own numbers, and
--notes notes that are all different, interleaved over two months. A block built for
a question counts the entries it shows whole (relevant and newest) and those its
digest's lines stand for (a fold of near-duplicates stands for every entry in it, a
sampled line for one); today's block counts the newest entries that fit. Also the
time to build the block, the first time (folding every older entry) and after.

Run: python -m bench.digest_bench [--footprints 3000] [--notes 400]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from datetime import datetime, timedelta

from bench.common import Figure, at_least, run_alone, scratch_workspace
from oryxmem.config import Config
from oryxmem.service import MemoryService, footprint_line
from oryxmem.store.format import (
    ARCHIVAL,
    CANONICAL_HEADINGS,
    CORE,
    render_entry_line,
)
from oryxmem.store.window import archival_window
from oryxmem.workspace import Workspace

REQUESTS = [
    "run the test suite",
    "deploy the api to staging",
    "what is the build status",
    "rebase my branch on main",
    "format the changed files",
    "summarize today's commits",
    "open a pull request for this",
    "check the flaky login test",
    "bump the version",
    "regenerate the lock file",
    "show the failing ci job",
    "update the changelog",
    "restart the dev server",
    "profile the import step",
    "check disk usage on build box",
    "lint the frontend",
    "run the migrations locally",
    "tag a release candidate",
    "review the open dependabot prs",
    "clear the build cache",
    "list todo comments",
    "measure bundle size",
    "run the benchmarks",
    "sync the fork",
    "check coverage",
    "rotate the staging secrets",
    "retry the nightly job",
    "compact the database",
    "explain this stack trace",
    "translate the error message",
    "find dead code",
    "update the docs site",
    "check the sentry errors",
    "warm the cache",
    "archive old logs",
    "draft the weekly update",
    "prune docker images",
    "check license headers",
    "run the smoke tests",
    "count open issues",
]
TOPICS = ["billing", "search", "onboarding", "export", "sync", "auth", "caching", "reports"]
QUESTION = "what did we decide about the release and the flaky tests?"


def write_agent(workspace: Workspace, footprints: int, notes: int) -> None:
    rng = random.Random(5)
    weights = [1 / (rank + 1) for rank in range(len(REQUESTS))]
    texts = [
        footprint_line(
            rng.choices(REQUESTS, weights)[0],
            f"done: {rng.randint(1, 400)} items in {rng.randint(1, 90)} s, {rng.randint(0, 9)}"
            f" warnings (run {rng.randrange(1 << 24):06x})",
            200,
        )
        for _ in range(footprints)
    ]
    texts += [
        f"decided: the {rng.choice(TOPICS)} module keeps {word} as its {rng.choice(TOPICS)}"
        f" boundary, note {n}"
        for n, word in enumerate(rng.choices(REQUESTS, k=notes))
    ]
    rng.shuffle(texts)
    start = datetime(2026, 9, 1, 9, 0)
    lines = [CANONICAL_HEADINGS[CORE], "", CANONICAL_HEADINGS[ARCHIVAL]]
    for n, text in enumerate(texts):
        ts = (start + timedelta(minutes=20 * n)).strftime("%Y-%m-%d %H:%M:%S")
        lines.append(render_entry_line(ts, text))
    path = workspace.memory_path("busy")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--footprints", type=int, default=3000)
    parser.add_argument("--notes", type=int, default=400)


def run(args: argparse.Namespace) -> list[Figure]:
    with scratch_workspace("oryxmem-digest-") as root:
        workspace = Workspace(root)
        write_agent(workspace, args.footprints, args.notes)
        service = MemoryService(workspace, Config.load(workspace.config_path))
        service.sync()
        service.reindex()
        ref = service.resolve("busy")
        _, archival = service.reader(ref).entries()
        limit = service.config.archival_limit_chars
        today = len(archival_window(archival, limit).lines)
        started = time.perf_counter()
        part = service.archival_part(ref, QUESTION)
        first = (time.perf_counter() - started) * 1000
        times = []
        for _ in range(20):
            started = time.perf_counter()
            service.archival_part(ref, QUESTION)
            times.append((time.perf_counter() - started) * 1000)
        service.close()
    digest = part.digest.represented if part.digest else 0
    ours = len(part.relevant) + len(part.newest) + part.repeats + digest
    lines = len(part.digest.lines) - 1 if part.digest else 0
    print(
        f"today's cut: {today} entries; with the question: {len(part.relevant)} relevant,"
        f" {len(part.newest)} newest (standing for {part.repeats} repeats too), {digest} in the"
        f" digest's {lines} lines, of {len(archival)}"
    )
    return [
        Figure("today's cut: entries in 4000 characters", today, ""),
        Figure("with a query and the digest: entries represented", ours, ""),
        Figure("  the ratio", ours / today, "x", at_least(3, 12, "x")),
        Figure("archival part, first build (folds everything)", first, "ms"),
        Figure("archival part p50, folds kept", statistics.median(times), "ms"),
    ]


def main(argv: list[str] | None = None) -> list[Figure]:
    return run_alone("digest", __doc__, options, run, argv)


if __name__ == "__main__":
    main()
