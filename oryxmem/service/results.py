"""What the service answers: plain values, shared by the rooms and the surfaces."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from oryxmem.store.format import Entry
from oryxmem.workspace import AgentRef


@dataclass(frozen=True)
class SaveResult:
    agent: AgentRef
    entry: Entry
    # Set when MEMORY.md could not take the entry yet (git conflict markers): it is
    # durable in SQLite and sync writes it to the file once the conflict is resolved.
    deferred: str | None = None


@dataclass(frozen=True)
class RecallResult:
    agent: AgentRef
    keyword: str
    lines: list[str]
    strategy: str = "keyword"  # memory.recall: keyword (every match, oldest first) or hybrid


@dataclass(frozen=True)
class SearchHit:
    entry: Entry
    score: float  # the fused score, 0 to 1
    arms: tuple[str, ...]  # which arms found it: exact, keyword, context, semantic


@dataclass(frozen=True)
class SearchResult:
    agent: AgentRef
    query: str
    mode: str
    hits: list[SearchHit]
    unembedded: int  # entries the semantic arm has not embedded yet (not searched by it)
    # Set when the semantic arm could not answer (its embeddings server is down, say):
    # a hybrid search then answers by words alone, and says so here.
    note: str | None = None
    # Entries the words arm has not taken in yet (a backlog the daemon's indexer is on).
    words_pending: int = 0


@dataclass(frozen=True)
class MemoryView:
    agent: AgentRef
    core: Sequence[Entry]
    archival: Sequence[Entry]
    markdown: str


# An entry where it is: its position in its section (1: the first), and the source its
# row names (who saved it: cli, socket, file, ...; None: no row yet).
Placed = tuple[int, Entry, str | None]


@dataclass(frozen=True)
class Page:
    """A page of one section, each entry placed."""

    agent: AgentRef
    scope: str
    offset: int
    total: int
    entries: list[Placed]
    version: str  # the file's stat: another when the file is written


@dataclass(frozen=True)
class AgentSummary:
    name: str  # '' = the global file
    core: int | None
    archival: int | None
    problem: str | None
    last_saved: str | None = None  # the newest entry's time
