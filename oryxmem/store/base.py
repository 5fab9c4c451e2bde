"""The long-term memory contract every backend keeps (docs/design.md §4)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from oryxmem.clock import Clock
from oryxmem.config import Config
from oryxmem.errors import ContentTooLongError, EmptyKeywordError
from oryxmem.store.format import (
    ARCHIVAL,
    Entry,
    EntryText,
    check_scope,
    entry_key,
    normalize_content,
)
from oryxmem.store.window import ArchivalWindow
from oryxmem.workspace import Workspace

if TYPE_CHECKING:
    from oryxmem.store.db import Database
    from oryxmem.store.markdown import MarkdownFiles


@dataclass(frozen=True)
class MemorySnapshot:
    """What a prompt gets: core whole, archival cut to the newest entries that fit."""

    core: list[Entry]
    archival: ArchivalWindow
    archival_total: int


class StoreLimits:
    """What a store allows: these numbers, or (``of``) a configuration's as it is at each
    use, so a daemon that reads config.toml again applies new limits to every store."""

    def __init__(self, archival_limit_chars: int = 4000, max_content_chars: int = 32768) -> None:
        self._fixed = (archival_limit_chars, max_content_chars)
        self._config: Config | None = None

    @classmethod
    def of(cls, config: Config) -> StoreLimits:
        limits = cls()
        limits._config = config
        return limits

    @property
    def archival_limit_chars(self) -> int:
        return self._fixed[0] if self._config is None else self._config.archival_limit_chars

    @property
    def max_content_chars(self) -> int:
        return self._fixed[1] if self._config is None else self._config.max_content_chars


@dataclass(frozen=True)
class StoreResources:
    """What a backend may use to serve an agent; the service builds it once."""

    workspace: Workspace
    config: Config
    files: MarkdownFiles
    database: Callable[[], Database]  # opened on first use
    index_database: Callable[[], Database]  # the derived indexes' file (store/indexdb.py)
    clock: Clock
    limits: StoreLimits


class LongTermMemoryStore(ABC):
    """One agent's long-term memory. Backends answer alike; callers never know which."""

    def __init__(self, *, clock: Clock, limits: StoreLimits) -> None:
        self.clock = clock
        self.limits = limits

    @classmethod
    @abstractmethod
    def for_agent(cls, agent: str, resources: StoreResources) -> LongTermMemoryStore:
        """The store of one resolved agent ('' for the global file)."""

    def append(self, content: str, scope: str = ARCHIVAL, *, ts: str | None = None) -> Entry:
        """Add a timestamped entry at the end of its section; durable on return."""
        return self._append(self.prepare(content, scope, ts=ts))

    def prepare(self, content: str, scope: str = ARCHIVAL, *, ts: str | None = None) -> Entry:
        """The entry a save would write, checked (scope, content, length) and stamped."""
        return prepare_entry(content, scope, ts or self.clock(), self.limits.max_content_chars)

    def recall(self, keyword: str) -> list[str]:
        """Archival entries containing keyword (casefolded), oldest first, as lines."""
        return [entry.render() for entry in self._recall(fold_keyword(keyword))]

    @abstractmethod
    def _append(self, addition: EntryText) -> Entry: ...

    @abstractmethod
    def _recall(self, folded_keyword: str) -> list[Entry]: ...

    @abstractmethod
    def load(self) -> MemorySnapshot:
        """Both sections for a prompt: core whole, archival cut to the limit."""

    @abstractmethod
    def entries(self) -> tuple[Sequence[Entry], Sequence[Entry]]:
        """Every (core, archival) entry, in order."""

    def archival_positions(self, archival: Sequence[Entry]) -> Mapping[str, int]:
        """Where each of these archival entries (as entries() gave them) is: id ->
        index. A store that keeps the map between calls says so by overriding this."""
        return {entry.entry_id: at for at, entry in enumerate(archival)}


def prepare_entry(content: str, scope: str, ts: str, max_content_chars: int) -> Entry:
    """An entry as a save would write it: scope checked, content normalized and in bounds."""
    check_scope(scope)
    text = normalize_content(content)
    if len(text) > max_content_chars:
        raise ContentTooLongError(
            f"content is {len(text)} characters; the limit is {max_content_chars}"
        )
    return Entry(scope, ts, text, entry_key(scope, ts, text))


def fold_keyword(keyword: str) -> str:
    """The keyword as recall matches it (casefolded); an empty one is an error."""
    if not keyword.strip():
        raise EmptyKeywordError("the recall keyword is empty")
    return keyword.casefold()
