"""The memory block with a query (issue 12): how often it holds the evidence.

Each LoCoMo dev conversation is one agent's MEMORY.md (as bench/recall_quality.py
builds it); for every question, the block is built with the question as the query
and scored by whether at least one evidence turn is inside its archival part
(memory.archival_limit_chars, 4000). Swept over the share of that budget the
relevant entries may take (prompt.RELEVANT_SHARE is the one used); share 0 is the
block without a query (the newest entries only).

Run: python -m bench.context_quality [--data ../shared/eval/locomo-dev.json]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from bench.common import Figure, at_least, at_most, run_alone, scratch_workspace
from bench.locomo import DEFAULT_PATH, load
from bench.recall_quality import write_memory
from oryxmem.config import Config
from oryxmem.prompt import RELEVANT_SHARE, archival_for_query
from oryxmem.service import MemoryService
from oryxmem.workspace import Workspace

SHARES = (0.0, 0.5, 0.6, RELEVANT_SHARE, 0.9, 1.0)


def evaluate(data: Path) -> tuple[dict[float, float], list[float]]:
    conversations = load(data)
    held: dict[float, list[float]] = {share: [] for share in SHARES}
    times = []
    with scratch_workspace("oryxmem-context-") as root:
        workspace = Workspace(root)
        for conversation in conversations:
            write_memory(workspace, conversation.sample_id, conversation)
        service = MemoryService(workspace, Config.load(workspace.config_path))
        service.sync()
        service.reindex()
        limit = service.config.archival_limit_chars
        for conversation in conversations:
            ref = service.resolve(conversation.sample_id)
            _, archival = service.reader(ref).entries()
            dia = {turn.content: turn.dia_id for turn in conversation.turns}
            for question in conversation.questions:
                started = time.perf_counter()
                service.build_context(conversation.sample_id, query=question.text)
                times.append((time.perf_counter() - started) * 1000)
                ranked = service.relevant_entries(ref, question.text)
                for share in SHARES:
                    part = archival_for_query(archival, ranked if share else [], limit, share)
                    shown = {dia.get(e.content) for e in part.relevant + part.newest}
                    held[share].append(1.0 if question.evidence & shown else 0.0)
        service.close()
    return {share: sum(v) / len(v) for share, v in held.items()}, times


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", type=Path, default=DEFAULT_PATH, help="LoCoMo-format JSON")


def run(args: argparse.Namespace) -> list[Figure]:
    if not args.data.exists():
        print(f"context quality: no data at {args.data}; skipped (see ../shared/eval/README.md)")
        return []
    shares, times = evaluate(args.data)
    print(f"{'relevant share':>15} {'evidence in block':>18}")
    for share, value in shares.items():
        mark = "  <- used" if share == RELEVANT_SHARE else ""
        print(f"{share:>15.2f} {value:>18.3f}{mark}")
    return [
        Figure("block without a query: evidence held", shares[0.0], ""),
        Figure(
            "block with the question: evidence held", shares[RELEVANT_SHARE], "", at_least(0.80, 12)
        ),
        Figure(
            "block with a query p50 (LoCoMo agent)",
            statistics.median(times),
            "ms",
            at_most(25, 12, "ms"),
        ),
    ]


def main(argv: list[str] | None = None) -> list[Figure]:
    return run_alone("context quality", __doc__, options, run, argv)


if __name__ == "__main__":
    main()
