"""The long-term memory contract every backend keeps (DESIGN section 4)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from oryxmem.clock import Clock
from oryxmem.errors import ContentTooLongError, EmptyKeywordError
from oryxmem.store.format import (
    ARCHIVAL,
    ArchivalWindow,
    Entry,
    NewEntry,
    check_scope,
    entry_key,
    normalize_content,
)


@dataclass(frozen=True)
class MemorySnapshot:
    """What a prompt gets: core whole, archival cut to the newest entries that fit."""

    core: list[Entry]
    archival: ArchivalWindow
    archival_total: int


@dataclass(frozen=True)
class StoreLimits:
    archival_limit_chars: int = 4000
    max_content_chars: int = 32768


class LongTermMemoryStore(ABC):
    """One agent's long-term memory. Backends answer alike; callers never know which."""

    def __init__(self, *, clock: Clock, limits: StoreLimits) -> None:
        self.clock = clock
        self.limits = limits

    def append(self, content: str, scope: str = ARCHIVAL, *, ts: str | None = None) -> Entry:
        """Add a timestamped entry at the end of its section; durable on return."""
        addition = self.prepare(content, scope, ts=ts)
        return self._append(NewEntry(addition.scope, addition.ts, addition.content))

    def prepare(self, content: str, scope: str = ARCHIVAL, *, ts: str | None = None) -> Entry:
        """The entry a save would write, checked (scope, content, length) and stamped."""
        check_scope(scope)
        text = normalize_content(content)
        if len(text) > self.limits.max_content_chars:
            raise ContentTooLongError(
                f"content is {len(text)} characters; the limit is {self.limits.max_content_chars}"
            )
        stamp = ts or self.clock()
        return Entry(scope, stamp, text, entry_key(scope, stamp, text))

    def recall(self, keyword: str) -> list[str]:
        """Archival entries containing keyword (casefolded), oldest first, as lines."""
        return [entry.render() for entry in self._recall(fold_keyword(keyword))]

    @abstractmethod
    def _append(self, addition: NewEntry) -> Entry: ...

    @abstractmethod
    def _recall(self, folded_keyword: str) -> list[Entry]: ...

    @abstractmethod
    def load(self) -> MemorySnapshot:
        """Both sections for a prompt: core whole, archival cut to the limit."""

    @abstractmethod
    def entries(self) -> tuple[list[Entry], list[Entry]]:
        """Every (core, archival) entry, in order."""


def fold_keyword(keyword: str) -> str:
    """The keyword as recall matches it (casefolded); an empty one is an error."""
    if not keyword.strip():
        raise EmptyKeywordError("the recall keyword is empty")
    return keyword.casefold()
