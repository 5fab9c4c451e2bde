"""The memory block of a prompt (block [2]) and the four-block prompt around it.

Without a query the block is DESIGN section 5's: core whole, then the newest archival
entries that fit ``memory.archival_limit_chars``, both headings always. With a query
(the user's current message) the same archival budget is shared: up to
RELEVANT_SHARE of it holds the entries a hybrid search ranks best for the query, the
rest the newest entries, and each part says what it is, so an agent (and a person
reading the prompt) can tell a line chosen for relevance from a recent one. Core is
never cut. Pure: the service gathers the entries and the ranking.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from oryxmem.store.format import ARCHIVAL, CANONICAL_HEADINGS, CORE, Entry

# The share of the archival budget the relevant entries may take with a query; what
# they leave goes to the newest. Chosen on the LoCoMo dev set (bench/context_quality.py).
RELEVANT_SHARE = 0.75
RELEVANT_NOTE = "(chosen for relevance to the current message, oldest first:)"
NEWEST_NOTE = "(the newest:)"


def omitted_note(count: int) -> str:
    return f"({count} earlier archival entries not shown; recall_memory searches all of them)"


@dataclass
class ArchivalPart:
    """The archival lines of a block, and which entries they show."""

    lines: list[str] = field(default_factory=list)
    relevant: list[Entry] = field(default_factory=list)
    newest: list[Entry] = field(default_factory=list)
    omitted: int = 0


def _cost(line: str) -> int:
    return len(line) + 1  # with its line break


def archival_for_query(
    archival: Sequence[Entry],
    ranked: Sequence[Entry],
    limit: int,
    share: float = RELEVANT_SHARE,
) -> ArchivalPart:
    """The archival part of a block for a query: the best-ranked entries that fit
    ``share`` of ``limit`` (each whole, in the file's order), then the newest that
    fit what is left; the notes that say which is which count against the limit."""
    part = ArchivalPart()
    order = {entry.entry_id: at for at, entry in enumerate(archival)}
    room = int(limit * share) - _cost(RELEVANT_NOTE)
    chosen: set[str] = set()
    for entry in ranked:
        if entry.entry_id in chosen or entry.entry_id not in order:
            continue
        cost = _cost(entry.render())
        if cost <= room:
            part.relevant.append(entry)
            chosen.add(entry.entry_id)
            room -= cost
    used = _cost(RELEVANT_NOTE) + sum(_cost(e.render()) for e in part.relevant) if chosen else 0
    room = limit - used - _cost(NEWEST_NOTE)
    for entry in reversed(archival):
        if entry.entry_id in chosen:
            continue
        cost = _cost(entry.render())
        if cost > room:
            break
        part.newest.append(entry)
        room -= cost
    part.newest.reverse()
    part.relevant.sort(key=lambda entry: order[entry.entry_id])
    part.omitted = len(archival) - len(part.relevant) - len(part.newest)
    if part.omitted:
        part.lines.append(omitted_note(part.omitted))
    if part.relevant:
        part.lines += [RELEVANT_NOTE, *(entry.render() for entry in part.relevant)]
    if part.newest:
        part.lines += [NEWEST_NOTE, *(entry.render() for entry in part.newest)]
    return part


def memory_block(core: Sequence[Entry], archival: ArchivalPart) -> str:
    """Block [2]: both headings always, core whole."""
    lines = [CANONICAL_HEADINGS[CORE], *(entry.render() for entry in core)]
    lines += [CANONICAL_HEADINGS[ARCHIVAL], *archival.lines]
    return "\n".join(lines) + "\n"
