"""Recall quality (issue 11): LoCoMo-format conversations, scored as ../shared/eval says.

Each conversation becomes one agent's MEMORY.md (a line per dialog turn, stamped
with its session's time); `sync` takes the files in and `reindex` embeds them,
so every retriever below answers through MemoryService, as an agent would be
answered:

- keyword recall: the substring contract, one call per question word (three
  letters or more, not a stopword), entries ranked by how many words they hold;
- bm25, semantic, hybrid: MemoryService.search in each mode;
- hybrid recall: what recall_memory answers with memory.recall = hybrid.

Prints recall@1/5/10 and any@1/5/10 overall and per category, and the p50 time
per question; and how many of the questions the keyword arm ranks the same from the
agents' terms held in memory (index/held.py) as by FTS5's bm25(): all of them, the
same rows with the same scores in the same order.

Run: python -m bench.recall_quality [--data ../shared/eval/locomo-dev.json] [--json]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from bench.common import Figure, at_least, run_alone, scratch_workspace
from bench.locomo import CATEGORIES, Conversation, Question, data_option, load
from oryxmem.config import Config, set_value
from oryxmem.index import held
from oryxmem.index.bm25 import BM25Index
from oryxmem.index.terms import STOPWORDS
from oryxmem.service import MemoryService
from oryxmem.store.db import read_snapshot
from oryxmem.store.dbfile import database_files
from oryxmem.store.format import ARCHIVAL, CANONICAL_HEADINGS, CORE, render_entry_line
from oryxmem.store.indexfile import ROWS
from oryxmem.workspace import Workspace

KS = (1, 5, 10)
# A retriever: (service, agent, question) -> the contents of the entries, best first.
Retriever = Callable[[MemoryService, str, str], list[str]]


def write_memory(workspace: Workspace, agent: str, conversation: Conversation) -> None:
    path = workspace.memory_path(agent)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [CANONICAL_HEADINGS[CORE], "", CANONICAL_HEADINGS[ARCHIVAL]]
    lines += [render_entry_line(turn.ts, turn.content) for turn in conversation.turns]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def keyword_recall(service: MemoryService, agent: str, question: str) -> list[str]:
    words = [w for w in (t.strip("?,.!'\"") for t in question.split()) if len(w) >= 3]
    hits: dict[str, int] = defaultdict(int)
    order: dict[str, int] = {}
    for word in words:
        if word.lower() in STOPWORDS:
            continue
        for line in service.recall(agent, word).lines:
            content = line.split("] ", 1)[1]
            hits[content] += 1
            order.setdefault(content, len(order))
    return sorted(hits, key=lambda c: (-hits[c], order[c]))


def searcher(mode: str) -> Retriever:
    def search(service: MemoryService, agent: str, question: str) -> list[str]:
        result = service.search(agent, question, limit=max(KS), mode=mode)
        return [hit.entry.content for hit in result.hits]

    return search


def hybrid_recall(service: MemoryService, agent: str, question: str) -> list[str]:
    return [line.split("] ", 1)[1] for line in service.recall(agent, question).lines]


RETRIEVERS: dict[str, tuple[str, Retriever]] = {
    "keyword recall": ("keyword", keyword_recall),
    "bm25": ("hybrid", searcher("keyword")),
    "semantic": ("hybrid", searcher("semantic")),
    "hybrid": ("hybrid", searcher("hybrid")),
    "hybrid recall": ("hybrid", hybrid_recall),
}


def score(
    ranked: list[str], question: Question, by_content: dict[str, set[str]]
) -> dict[tuple[str, int], float]:
    """recall@k and any@k of one question (a turn found by its content)."""
    out = {}
    for k in KS:
        found: set[str] = set()
        for content in ranked[:k]:
            found |= by_content.get(content, set())
        hit = question.evidence & found
        out[("recall", k)] = len(hit) / len(question.evidence)
        out[("any", k)] = 1.0 if hit else 0.0
    return out


def evaluate(data: Path) -> dict[str, dict[str, object]]:
    conversations = load(data)
    results: dict[str, dict[str, object]] = {}
    with scratch_workspace("oryxmem-recall-") as root:
        workspace = Workspace(root)
        for conversation in conversations:
            write_memory(workspace, conversation.sample_id, conversation)
        for name, (strategy, retrieve) in RETRIEVERS.items():
            set_value(workspace.config_path, "memory.recall", strategy)
            service = MemoryService(workspace, Config.load(workspace.config_path))
            service.sync()
            service.reindex()  # embeds what is not embedded yet (once; kept in the db)
            sums: dict[tuple[str, object, int], list[float]] = defaultdict(list)
            times = []
            for conversation in conversations:
                by_content: dict[str, set[str]] = defaultdict(set)
                for turn in conversation.turns:
                    by_content[turn.content].add(turn.dia_id)
                for question in conversation.questions:
                    started = time.perf_counter()
                    ranked = retrieve(service, conversation.sample_id, question.text)
                    times.append((time.perf_counter() - started) * 1000)
                    for (metric, k), value in score(ranked, question, by_content).items():
                        sums[(metric, "all", k)].append(value)
                        sums[(metric, question.category, k)].append(value)
            if name == "bm25":
                results["held"] = {"same": held_the_same(service, conversations)}
            service.close()
            results[name] = {
                "scores": {f"{m}@{k} {c}": sum(v) / len(v) for (m, c, k), v in sums.items()},
                "p50_ms": statistics.median(times),
                "questions": len(times),
            }
    return results


def held_the_same(service: MemoryService, conversations: list[Conversation]) -> float:
    """The share of the questions (each asked for every match and for the 200 best)
    the keyword arm ranks from the agents' copies exactly as FTS5 does, once every agent
    has its copy (0 when one has none)."""
    bm25, db = BM25Index(service.config), service.index_db
    for conversation in conversations:  # searched as often as a copy needs
        for _ in range(held.WANTED):
            with read_snapshot(db):
                bm25.ranked(db, conversation.sample_id, "warm", 1)
    held.settle()
    (epoch,) = db.execute("SELECT epoch FROM memory_terms_count").fetchone()
    files = database_files(db)
    if len(held.held_terms(files["main"], int(epoch), files[ROWS]).copies) != len(conversations):
        return 0.0
    same = asked = 0
    for conversation in conversations:
        for question in conversation.questions:
            for limit in (None, 200):
                with read_snapshot(db):
                    copy = bm25.ranked(db, conversation.sample_id, question.text, limit)
                    fts5 = bm25.ranked(db, conversation.sample_id, question.text, limit, held=False)
                asked += 1
                same += all(
                    mine.tolist() == theirs.tolist()
                    for mine, theirs in (
                        (copy.row_ids, fts5.row_ids),
                        (copy.scores, fts5.scores),
                        (copy.own, fts5.own),
                    )
                )
    return same / asked


def print_table(results: dict[str, dict[str, object]]) -> None:
    cats = [str(c) for c in CATEGORIES]
    head = (
        f"{'retriever':<15} {'R@1':>6} {'R@5':>6} {'R@10':>6} {'any@5':>6} "
        + " ".join(f"{CATEGORIES[int(c)][:11] + ' R@5':>16}" for c in cats)
        + f" {'p50':>8}"
    )
    print(head)
    for name, result in results.items():
        if name == "held":
            continue
        s = result["scores"]
        assert isinstance(s, dict)
        row = f"{name:<15} {s['recall@1 all']:>6.3f} {s['recall@5 all']:>6.3f}"
        row += f" {s['recall@10 all']:>6.3f} {s['any@5 all']:>6.3f} "
        row += " ".join(f"{s[f'recall@5 {c}']:>16.3f}" for c in cats)
        row += f" {result['p50_ms']:>6.1f}ms"
        print(row)


def options(parser: argparse.ArgumentParser) -> None:
    data_option(parser)


def run(args: argparse.Namespace) -> list[Figure]:
    if not args.data.exists():
        print(f"recall quality: no data at {args.data}; skipped (see ../shared/eval/README.md)")
        return []
    results = evaluate(args.data)
    if not getattr(args, "quiet_table", False):
        print_table(results)
    same = results.pop("held")["same"]
    assert isinstance(same, float)
    figures = [Figure("bm25 from held copies: rankings as FTS5's", same, "", at_least(1.0, 21))]
    for name, result in results.items():
        s = result["scores"]
        assert isinstance(s, dict)
        goals = {5: at_least(0.60, 11), 10: at_least(0.70, 11)} if name == "hybrid" else {}
        for k in KS:
            figures.append(Figure(f"{name} recall@{k}", s[f"recall@{k} all"], "", goals.get(k)))
        p50 = result["p50_ms"]
        assert isinstance(p50, float)
        figures.append(Figure(f"{name} p50 per question", p50, "ms"))
    bm25 = results["bm25"]["scores"]
    hybrid = results["hybrid"]["scores"]
    assert isinstance(bm25, dict) and isinstance(hybrid, dict)
    worst = min(hybrid[f"recall@5 {c}"] - bm25[f"recall@5 {c}"] for c in CATEGORIES)
    figures.append(Figure("hybrid - bm25, worst category (R@5)", worst, "", at_least(0.0, 11)))
    return figures


def main(argv: list[str] | None = None) -> list[Figure]:
    return run_alone("recall quality", __doc__, options, run, argv)


if __name__ == "__main__":
    main()
