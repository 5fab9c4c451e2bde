"""Episodic memory (issue 12): how often episode search finds the round that holds the
evidence.

Each LoCoMo dev conversation is one agent, each of its sessions one oryxmem session
(speaker_a's turns as user messages, speaker_b's as the replies, stamped with the
session's time), imported as `oryxmem sessions import` imports a transcript. For every
question, MemoryService.search_episodes ranks the agent's rounds; a question counts
when a round in the top k holds one of its evidence turns (any@k), for k = 1, 5, 10,
and any@5 by the question's category and by conversation (a change to ranking is kept
when it loses no conversation a question, not for the sum alone). Rounds by BM25 alone
(the words arm) are shown beside the hybrid ranking.

Run: python -m bench.episodes_quality [--data ../shared/eval/locomo-dev.json]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from bench.common import Figure, at_least, run_alone, scratch_workspace
from bench.locomo import CATEGORIES, Conversation, data_option, load
from oryxmem.config import Config
from oryxmem.index.episodes import EpisodeIndex, rounds
from oryxmem.service import MemoryService
from oryxmem.workspace import Workspace

KS = (1, 5, 10)


def load_sessions(
    service: MemoryService, conversation: Conversation
) -> dict[tuple[str, int], set[str]]:
    """The conversation's sessions as the agent's; (session id, round) -> its dia ids."""
    held: dict[tuple[str, int], set[str]] = {}
    for number, turns in conversation.sessions().items():
        messages = [
            {
                "role": "user" if turn.speaker == conversation.speakers[0] else "assistant",
                "content": turn.content,
                "at": turn.ts,
            }
            for turn in turns
        ]
        session, _ = service.sessions.store.import_messages(
            conversation.sample_id, f"locomo:{conversation.sample_id}:{number}", messages
        )
        made = rounds(messages)
        for at, made_round in enumerate(made):
            end = made[at + 1].first_message if at + 1 < len(made) else len(turns)
            ids = {turns[i].dia_id for i in range(made_round.first_message, end)}
            held[(session, made_round.number)] = ids
    return held


# any@k by ranking, then k (an int) or "any@5 <category>"
Scores = dict[str, dict[int | str, float]]
COLUMNS: list[int | str] = [*KS, *(f"any@5 {c}" for c in CATEGORIES.values())]
# The hybrid ranking's questions found in the top 5, and asked, by conversation.
ByConversation = dict[str, tuple[int, int]]


def evaluate(data: Path) -> tuple[Scores, list[float], ByConversation]:
    conversations = load(data)
    found: dict[str, dict[int | str, list[float]]] = {
        name: {k: [] for k in COLUMNS} for name in ("bm25 rounds", "hybrid rounds")
    }
    times = []
    by_conversation: ByConversation = {}
    with scratch_workspace("oryxmem-episodes-") as root:
        workspace = Workspace(root)
        service = MemoryService(workspace, Config.load(workspace.config_path))
        held = {}
        for conversation in conversations:
            held.update(load_sessions(service, conversation))
        while service.episodes_step():
            pass
        words = EpisodeIndex(None, None)
        for conversation in conversations:
            for question in conversation.questions:
                started = time.perf_counter()
                hybrid = service.search_episodes(conversation.sample_id, question.text, max(KS))
                times.append((time.perf_counter() - started) * 1000)
                bm25 = words.search(
                    service.index_db, conversation.sample_id, question.text, max(KS)
                )
                for name, hits in (("hybrid rounds", hybrid), ("bm25 rounds", bm25)):
                    for k in KS:
                        ids = set().union(*(held[(h.session, h.round)] for h in hits[:k]))
                        found[name][k].append(1.0 if question.evidence & ids else 0.0)
                    category = f"any@5 {CATEGORIES[question.category]}"
                    found[name][category].append(found[name][5][-1])
                hit, asked = by_conversation.get(conversation.sample_id, (0, 0))
                hit += int(found["hybrid rounds"][5][-1])
                by_conversation[conversation.sample_id] = (hit, asked + 1)
        service.close()
    means = {n: {k: sum(v) / max(len(v), 1) for k, v in by_k.items()} for n, by_k in found.items()}
    return means, times, by_conversation


def options(parser: argparse.ArgumentParser) -> None:
    data_option(parser)


def run(args: argparse.Namespace) -> list[Figure]:
    if not args.data.exists():
        print(f"episodes quality: no data at {args.data}; skipped (see ../shared/eval/README.md)")
        return []
    scores, times, by_conversation = evaluate(args.data)
    print(
        f"{'ranking':<15} " + " ".join(f"{'any@' + str(k) if k in KS else k:>17}" for k in COLUMNS)
    )
    for name, by_k in scores.items():
        print(f"{name:<15} " + " ".join(f"{by_k[k]:>17.3f}" for k in COLUMNS))
    found = ", ".join(f"{c} {hit}/{asked}" for c, (hit, asked) in by_conversation.items())
    print(f"hybrid rounds, any@5 by conversation: {found}")
    hybrid = scores["hybrid rounds"]
    return [
        Figure("episode search any@5 (bm25 rounds)", scores["bm25 rounds"][5], ""),
        Figure("episode search any@5", hybrid[5], "", at_least(0.82, 21)),
        *(Figure(f"  {c}", hybrid[c], "") for c in COLUMNS if isinstance(c, str)),
        Figure("episode search p50", statistics.median(times), "ms"),
    ]


def main(argv: list[str] | None = None) -> list[Figure]:
    return run_alone("episodes quality", __doc__, options, run, argv)


if __name__ == "__main__":
    main()
