"""The memory block of a prompt (block [2]) and the four-block prompt around it.

The prompt, in the seed's order: [1] the body of the agent's AGENT.md (front matter
stripped) and the bootstrap files (``prompt.bootstrap_files``, USER.md by default),
read only, a missing one left out; [2] the memory block; [3] the session's last turns;
[4] the tools as JSON Schema. As one text and as parts an agent loop can place (the
system text, the tool definitions).

Without a query the block is docs/design.md §5's: core whole, then the newest archival
entries that fit ``memory.archival_limit_chars``, both headings always. With a query
(the user's current message) the same archival budget is shared: up to
RELEVANT_SHARE of it holds the entries a hybrid search ranks best for the query, the
rest the newest entries, and each part says what it is, so an agent (and a person
reading the prompt) can tell a line chosen for relevance from a recent one. Core is
never cut. Pure: the service gathers the entries and the ranking.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oryxmem.digest import Digest, FoldsView, digest, repeat_key
from oryxmem.errors import OryxError
from oryxmem.fileio import open_regular
from oryxmem.store.format import ARCHIVAL, CANONICAL_HEADINGS, CORE, Entry

if TYPE_CHECKING:  # the block without a query is built without the episode index (numpy)
    from oryxmem.index.episodes import EpisodeHit

# The share of the archival budget the relevant entries may take with a query; what
# they leave goes to the newest. Chosen on the LoCoMo dev set (bench/context_quality.py).
RELEVANT_SHARE = 0.6
RELEVANT_NOTE = "(chosen for relevance to the current message, oldest first:)"
NEWEST_NOTE = "(the newest, one of each kind:)"
NEWEST_SCAN = 2000  # the newest part looks no further back than this for room


def omitted_note(count: int, repeats: int = 0) -> str:
    of_them = f", {repeats} of them repeats of lines below" if repeats else ""
    return (
        f"({count} earlier archival entries not shown{of_them}; recall_memory searches all of them)"
    )


@dataclass
class ArchivalPart:
    """The archival lines of a block, and which entries they show."""

    lines: list[str] = field(default_factory=list)
    relevant: list[Entry] = field(default_factory=list)
    newest: list[Entry] = field(default_factory=list)
    omitted: int = 0
    repeats: int = 0  # near-duplicates of shown lines, left out (the newest part)
    digest: Digest | None = None


def _cost(line: str) -> int:
    return len(line) + 1  # with its line break


def _all_fit(archival: Sequence[Entry], limit: int) -> bool:
    """Do all of these entries fit the limit? (Reads only as many as the limit holds.)"""
    used = 0
    for entry in reversed(archival):
        used += _cost(entry.render())
        if used > limit:
            return False
    return True


def archival_for_query(
    archival: Sequence[Entry],
    ranked: Sequence[Entry],
    limit: int,
    share: float = RELEVANT_SHARE,
    digest_share: float = 0.0,
    folds: Callable[[int], FoldsView] | None = None,
    rewrite: Callable[[Digest, int], list[str] | None] | None = None,
    positions: Mapping[str, int] | None = None,
) -> ArchivalPart:
    """The archival part of a block for a query: the best-ranked entries that fit
    ``share`` of ``limit`` (each whole, one of each set of near-duplicates, in the
    file's order), the newest that fit what is left but ``digest_share``, and a digest
    of the entries older than those (digest.py) in the rest; the notes that say which is
    which count against the limit. ``folds(upto)`` gives the folds of archival[:upto];
    ``rewrite(digest, chars)`` may give the digest's lines as a model writes them;
    ``positions`` is where each entry is in archival, if known."""
    part = ArchivalPart()
    if _all_fit(archival, limit):  # nothing to choose: every entry, as without a query
        part.newest = list(archival)
        part.lines = [entry.render() for entry in archival]
        return part
    order = (
        positions if positions is not None else {e.entry_id: at for at, e in enumerate(archival)}
    )
    kinds: set[str] = set()  # the repeat_key of every entry shown
    part.relevant = _most_relevant(ranked, order, int(limit * share) - _cost(RELEVANT_NOTE), kinds)
    used = _cost(RELEVANT_NOTE) + sum(_cost(e.render()) for e in part.relevant)
    reserved = 0 if folds is None else int(limit * digest_share)
    room = limit - (used if part.relevant else 0) - _cost(NEWEST_NOTE) - reserved
    start, room = _take_newest(part, archival, room, kinds)
    part.relevant.sort(key=lambda entry: order[entry.entry_id])
    part.omitted = len(archival) - len(part.relevant) - len(part.newest)
    if part.omitted and folds is not None and reserved:
        shown = {e.entry_id for e in part.relevant if order[e.entry_id] < start}
        part.digest = _digest_of(folds(start), archival, room + reserved, shown, rewrite)
    part.lines = _archival_lines(part)
    return part


def _digest_of(
    older: FoldsView,
    archival: Sequence[Entry],
    chars: int,
    shown: set[str],
    rewrite: Callable[[Digest, int], list[str] | None] | None,
) -> Digest:
    """The digest of the entries before the newest part, in a model's words if it gives any."""
    made = digest(older, archival, chars, shown)
    written = rewrite(made, chars) if rewrite and made.lines else None
    return replace(made, lines=written) if written else made


def _most_relevant(
    ranked: Sequence[Entry], order: Mapping[str, int], room: int, kinds: set[str]
) -> list[Entry]:
    """The best-ranked entries of archival that fit ``room``, one of each kind (added to
    ``kinds``), best first."""
    chosen: list[Entry] = []
    ids: set[str] = set()
    for entry in ranked:
        if entry.entry_id in ids or entry.entry_id not in order:
            continue
        kind = repeat_key(entry.content)
        cost = _cost(entry.render())
        if cost <= room and kind not in kinds:
            chosen.append(entry)
            ids.add(entry.entry_id)
            kinds.add(kind)
            room -= cost
    return chosen


def _take_newest(
    part: ArchivalPart, archival: Sequence[Entry], room: int, kinds: set[str]
) -> tuple[int, int]:
    """Fill ``part.newest`` with the newest entries not shown that fit ``room`` (a repeat
    of one shown counts in ``part.repeats`` instead); gives (where in archival the newest
    part begins, the room left)."""
    shown = {entry.entry_id for entry in part.relevant}
    start = len(archival)
    for at in range(len(archival) - 1, max(len(archival) - NEWEST_SCAN, 0) - 1, -1):
        entry = archival[at]
        if entry.entry_id in shown:
            continue
        kind = repeat_key(entry.content)
        if kind in kinds:  # a repeat of one shown: it stands for this one too
            part.repeats += 1
            start = at
            continue
        cost = _cost(entry.render())
        if cost > room:
            break
        part.newest.append(entry)
        kinds.add(kind)
        room -= cost
        start = at
    part.newest.reverse()
    return start, room


def _archival_lines(part: ArchivalPart) -> list[str]:
    """The part's lines: the omitted note, the relevant, the digest, the newest."""
    lines = [omitted_note(part.omitted, part.repeats)] if part.omitted else []
    if part.relevant:
        lines += [RELEVANT_NOTE, *(entry.render() for entry in part.relevant)]
    if part.digest is not None:
        lines += part.digest.lines
    if part.newest:
        lines += [NEWEST_NOTE, *(entry.render() for entry in part.newest)]
    return lines


EPISODES_HEADING = "## 情景记忆"  # episodic memory
EPISODES_NOTE = "(rounds of other sessions relevant to the current message, by session:)"
ROUND_SHOWN_CHARS = 600  # the most of one round's text a block shows
ROUND_LEAST_CHARS = 80  # a round is not begun in less room than this


def episodes_part(hits: Sequence[EpisodeHit], max_chars: int) -> list[str]:
    """The rounds best for the query that fit ``max_chars`` (best first chosen, each cut to
    ROUND_SHOWN_CHARS), shown grouped by session, sessions and rounds in time order."""
    room = max_chars - _cost(EPISODES_NOTE)
    chosen: list[tuple[EpisodeHit, list[str]]] = []
    sessions: set[str] = set()
    for hit in hits:
        header = 0 if hit.session in sessions else _cost(_session_line(hit))
        if room - header < ROUND_LEAST_CHARS:
            break
        lines = _round_lines(hit, min(room - header, ROUND_SHOWN_CHARS))
        if not lines:
            continue
        chosen.append((hit, lines))
        sessions.add(hit.session)
        room -= header + sum(_cost(line) for line in lines)
    if not chosen:
        return []
    by_session: dict[str, list[tuple[EpisodeHit, list[str]]]] = {}
    for hit, lines in sorted(chosen, key=lambda c: (c[0].at or "", c[0].round)):
        by_session.setdefault(hit.session, []).append((hit, lines))
    out = [EPISODES_NOTE]
    for rounds in by_session.values():
        out.append(_session_line(rounds[0][0]))
        for _, lines in sorted(rounds, key=lambda r: r[0].round):
            out += lines
    return out


def _session_line(hit: EpisodeHit) -> str:
    return f"session {hit.session[:12]}:"


def _round_lines(hit: EpisodeHit, limit: int) -> list[str]:
    """A round as indented lines, the first dated, within ``limit`` characters in all."""
    lines = []
    left = limit
    for number, text in enumerate(hit.text.splitlines()):
        prefix = f"  [{hit.at}] " if number == 0 and hit.at else "  "
        room = left - len(prefix) - 1
        if room < 20:
            break
        shown = text if len(text) <= room else text[: room - 1].rstrip() + "…"
        lines.append(prefix + shown)
        left -= len(lines[-1]) + 1
    return lines


def memory_block(
    core: Sequence[Entry], archival: ArchivalPart, episodes: Sequence[str] = ()
) -> str:
    """Block [2]: both headings always, core whole; the episodes part when there is one."""
    lines = [CANONICAL_HEADINGS[CORE], *(entry.render() for entry in core)]
    lines += [CANONICAL_HEADINGS[ARCHIVAL], *archival.lines]
    if episodes:
        lines += [EPISODES_HEADING, *episodes]
    return "\n".join(lines) + "\n"


# --- the prompt -------------------------------------------------------------------

PROMPT_FILE_MAX_BYTES = 256 * 1024  # a bootstrap file larger than this is left out
FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n.*?^(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.S | re.M)


def strip_front_matter(text: str) -> str:
    """The body of a Markdown file: a leading YAML front matter block (``---`` lines
    around it) taken off; a file that opens no such block is all body."""
    return FRONT_MATTER.sub("", text, count=1).strip("\n")


@dataclass(frozen=True)
class PromptFile:
    name: str  # as the prompt shows it: AGENT.md, USER.md
    text: str


def read_prompt_file(path: Path, name: str, notes: list[str]) -> PromptFile | None:
    """A bootstrap file's body, or None (missing: silently; anything odd: with a note).
    Only a regular file is read (never through a link: a cloned repository could point
    one anywhere)."""
    try:
        fd = open_regular(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    except (OSError, OryxError) as error:
        notes.append(f"{name} left out: {getattr(error, 'message', error)}")
        return None
    with os.fdopen(fd, "rb") as handle:
        raw = handle.read(PROMPT_FILE_MAX_BYTES + 1)
    if len(raw) > PROMPT_FILE_MAX_BYTES:
        notes.append(f"{name} left out: larger than {PROMPT_FILE_MAX_BYTES // 1024} KiB")
        return None
    try:
        text = strip_front_matter(raw.decode("utf-8"))
    except UnicodeDecodeError:
        notes.append(f"{name} left out: not UTF-8 text")
        return None
    return PromptFile(name, text) if text.strip() else None


@dataclass
class Prompt:
    """The four blocks, as parts and as one text."""

    files: list[PromptFile]  # [1]
    memory: str  # [2]
    history: list[dict[str, Any]]  # [3]
    tools: list[dict[str, Any]]  # [4], plain JSON Schema
    notes: list[str] = field(default_factory=list)

    @property
    def system(self) -> str:
        """Blocks [1] and [2]: what an agent loop puts in its system message."""
        parts = [f"# {file.name}\n\n{file.text}" for file in self.files]
        parts.append(f"# Memory\n\n{self.memory.rstrip()}")
        return "\n\n".join(parts) + "\n"

    @property
    def text(self) -> str:
        """All four blocks in order, as one text."""
        parts = [self.system.rstrip()]
        if self.history:
            turns = "\n".join(
                f"{message['role']}: {message['content']}" for message in self.history
            )
            parts.append(f"# Conversation so far\n\n{turns}")
        parts.append("# Tools\n\n" + json.dumps(self.tools, ensure_ascii=False, indent=2))
        return "\n\n".join(parts) + "\n"

    def data(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "system": self.system,
            "files": [{"name": f.name, "text": f.text} for f in self.files],
            "memory": self.memory,
            "history": self.history,
            "tools": self.tools,
            "notes": self.notes,
        }
