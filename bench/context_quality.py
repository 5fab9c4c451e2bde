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
from bench.locomo import data_option, load
from bench.recall_quality import write_memory
from oryxmem.config import Config
from oryxmem.prompt import RELEVANT_SHARE, archival_for_query
from oryxmem.service import MemoryService
from oryxmem.service.prompting import RELEVANT_POOL
from oryxmem.store.format import ARCHIVAL, CANONICAL_HEADINGS, render_entry_line
from oryxmem.workspace import Workspace

SHARES = (0.0, 0.5, RELEVANT_SHARE, 0.75, 0.9, 1.0)


def evaluate(data: Path) -> tuple[dict[float, float], float, list[float]]:
    """The share of questions with evidence in the archival part: per relevant share
    (without a digest), and in the block as built (the digest's share reserved)."""
    conversations = load(data)
    held: dict[float, list[float]] = {share: [] for share in SHARES}
    in_block: list[float] = []
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
            line_of = {render_entry_line(t.ts, t.content): t.dia_id for t in conversation.turns}
            for question in conversation.questions:
                started = time.perf_counter()
                block = service.build_context(conversation.sample_id, query=question.text)
                times.append((time.perf_counter() - started) * 1000)
                lines = block.split(CANONICAL_HEADINGS[ARCHIVAL] + "\n", 1)[1].splitlines()
                found = {line_of.get(line) for line in lines}
                in_block.append(1.0 if question.evidence & found else 0.0)
                ranked = service.finding.relevant_entries(ref.agent, question.text, RELEVANT_POOL)
                for share in SHARES:
                    part = archival_for_query(archival, ranked if share else [], limit, share)
                    shown = {dia.get(e.content) for e in part.relevant + part.newest}
                    held[share].append(1.0 if question.evidence & shown else 0.0)
        service.close()
    shares = {share: sum(v) / len(v) for share, v in held.items()}
    return shares, sum(in_block) / len(in_block), times


def options(parser: argparse.ArgumentParser) -> None:
    data_option(parser)


def run(args: argparse.Namespace) -> list[Figure]:
    if not args.data.exists():
        print(f"context quality: no data at {args.data}; skipped (see ../shared/eval/README.md)")
        return []
    shares, built, times = evaluate(args.data)
    print(f"{'relevant share':>15} {'evidence in block':>18}")
    for share, value in shares.items():
        mark = "  <- used" if share == RELEVANT_SHARE else ""
        print(f"{share:>15.2f} {value:>18.3f}{mark}")
    print(f"{'as built':>15} {built:>18.3f}  (with the digest's share reserved)")
    return [
        Figure("block without a query: evidence held", shares[0.0], ""),
        Figure("block with the question, as built: evidence held", built, "", at_least(0.80, 12)),
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
