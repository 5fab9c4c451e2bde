"""The archival entries a memory block shows without a query: the newest that fit."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from oryxmem.store.format import Entry, escape_content

TRUNCATION_MARK = "…"


@dataclass(frozen=True)
class ArchivalWindow:
    """The archival entries that fit the prompt, newest kept, oldest first."""

    lines: list[str]
    omitted: int
    newest_was_cut: bool


def archival_window(entries: Sequence[Entry], archival_limit_chars: int) -> ArchivalWindow:
    """The most recent whole entries whose rendered lines fit the limit.

    Lines are counted with their line break. When even the newest entry alone
    is too long, its end is kept and its line is marked with TRUNCATION_MARK.
    """
    kept: list[str] = []
    used = 0
    for entry in reversed(entries):
        line = entry.render()
        cost = len(line) + 1
        if used + cost > archival_limit_chars:
            break
        kept.append(line)
        used += cost
    if kept or not entries:
        kept.reverse()
        return ArchivalWindow(kept, len(entries) - len(kept), False)
    newest = entries[-1]
    prefix = f"- [{newest.ts}] " if newest.ts else "- "
    room = max(archival_limit_chars - len(prefix) - len(TRUNCATION_MARK) - 1, 0)
    escaped = escape_content(newest.content)
    tail = escaped[len(escaped) - room :] if room else ""
    return ArchivalWindow([prefix + TRUNCATION_MARK + tail], len(entries) - 1, True)
