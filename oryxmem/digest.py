"""The digest: the older archival entries a memory block cannot show whole, in a few lines.

A block built for a query shows the relevant entries and the newest whole; the rest
of a long archival section would vanish. Instead, ``summarize.digest_share`` of the
budget holds a digest of them (derived, never written to MEMORY.md; recall still
searches every entry):

1. near-duplicates are folded: entries whose text is the same once numbers, hex ids
   and spacing are masked, and the footprints of the same request (``trigger:
   user="..."``, whatever the reply), become one line with a count and a date range;
2. the biggest folds come first (they stand for the most entries), then single entries
   sampled evenly over the older span (stable positions, so the digest changes little
   as entries age into it), each line cut to LINE_CHARS, as many as the share holds.

The folds are kept per agent and extended as entries age into the older span (a
file that changed otherwise is folded again), so a block costs what the new entries
cost. When ``summarize.llm_url`` names an OpenAI-compatible chat server, the same
lines are given to that model to write the digest (summarize.py); whatever it does,
this offline digest is there to fall back on.
"""

from __future__ import annotations

import bisect
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from oryxmem.heap import give_back_freed_memory
from oryxmem.intmap import IntMap
from oryxmem.store.format import Entry, escape_content

LINE_CHARS = 160  # the most of one entry's text a digest line shows
# The kinds of the entries each block looks at again (the newest part, as far back as
# prompt.NEWEST_SCAN, and the sampled ones) are kept: two regex passes an entry, not
# on every block.
KINDS_KEPT = 4096
SAMPLE_SLOTS = 64  # evenly spaced positions single entries are sampled from
DIGEST_NOTE = (
    "(digest of the {count} earlier entries not shown whole: repeats folded, a sample of"
    " the rest; recall_memory searches all of them)"
)

_FOOTPRINT = re.compile(r'^trigger: user="(.*?)" reply=', re.S)
# Hex ids (7 or more hex digits, whole) and runs of digits: one pass, not two.
_NUMBERS = re.compile(r"\b[0-9a-f]{7,}\b|\d+")
_WORD = re.compile(r"[\w#]+")


def fold_key(content: str) -> str:
    """What near-duplicates share (the digest folds them): the request of a footprint,
    or the text with numbers, hex ids, case, punctuation and spacing masked."""
    return _key(content, mask_numbers=True)


@lru_cache(maxsize=1 << 16)
def repeat_key(content: str) -> str:
    """What repeats share (a block shows one of them whole): the request of a footprint,
    or the text with case, punctuation and spacing masked (numbers count: 'tagged v1.4'
    is no repeat of 'tagged v1.5')."""
    return _key(content, mask_numbers=False)


def _key(content: str, *, mask_numbers: bool) -> str:
    footprint = _FOOTPRINT.match(content)
    text = (footprint.group(1) if footprint else content).casefold()
    if mask_numbers:
        text = _NUMBERS.sub("#", text)
    key = " ".join(_WORD.findall(text))
    return f"trigger:{key}" if footprint else key


@dataclass(slots=True)  # one per kind of more than one entry
class Fold:
    """Entries that are near-duplicates of each other, oldest to newest."""

    count: int
    first: Entry
    last: Entry
    last_at: int  # the last one's position: of two folds as big, the newer comes first


@lru_cache(maxsize=KINDS_KEPT)
def kind_of(content: str) -> int:
    """The fold a content belongs to, as a number: its fold_key's hash. A large memory
    holds mostly entries of a kind of their own, and a number costs a tenth of the key
    (the text of the entry, masked) to keep; two keys of one hash (one chance in 2**64
    per pair, in one process) would share a line of the digest, which is derived."""
    return hash(fold_key(content))


@dataclass
class Folds:
    """The folds of an agent's archival entries [0, covered): extended as it grows. Where
    each fold's entries are is kept, so the folds of a shorter span are had without
    folding again (``upto``). A kind seen once is kept as its position alone, and
    becomes a Fold when it is seen again."""

    covered: int = 0
    last_id: str | None = None  # the id of entry covered - 1: the prefix is still the same
    # kinds of one entry -> its position: most kinds of a large memory (a compact map)
    single: IntMap = field(default_factory=IntMap)
    folds: dict[int, Fold] = field(default_factory=dict)  # kinds of more than one entry
    places: dict[int, list[int]] = field(default_factory=dict)  # kind -> positions

    def extend(self, entries: Sequence[Entry], upto: int) -> bool:
        """Cover entries[:upto] (at least what is covered); False when the covered prefix
        changed (fold again)."""
        if self.covered > len(entries) or (
            self.covered and entries[self.covered - 1].entry_id != self.last_id
        ):
            return False
        single, folds, places = self.single, self.folds, self.places
        for at in range(self.covered, upto):
            entry = entries[at]
            kind = kind_of(entry.content)
            fold = folds.get(kind)
            if fold is not None:
                fold.count += 1
                fold.last, fold.last_at = entry, at
                places[kind].append(at)
                continue
            first = single.pop(kind)
            if first is None:
                single.set(kind, at)
            else:
                folds[kind] = Fold(2, entries[first], entry, at)
                places[kind] = [first, at]
        single.settle()
        self.covered = max(self.covered, upto)
        self.last_id = entries[self.covered - 1].entry_id if self.covered else None
        return True

    def upto(self, entries: Sequence[Entry], upto: int) -> FoldsView:
        """The folds of entries[:upto] (upto <= covered): the folds of the entries past it
        are taken back, the rest shared."""
        changed: dict[int, Fold | None] = {}
        for at in range(upto, self.covered):
            kind = kind_of(entries[at].content)
            if kind in changed or kind not in self.folds:
                continue  # a kind of one entry (past upto) is no fold either way
            places = self.places[kind]
            kept = bisect.bisect_left(places, upto)
            if kept < 2:
                changed[kind] = None  # one or none of them before upto: no fold there
            else:
                first = self.folds[kind].first
                changed[kind] = Fold(kept, first, entries[places[kept - 1]], places[kept - 1])
        return FoldsView(self, changed, upto)


@dataclass
class FoldsView:
    """The folds (of more than one entry) of entries[:covered], over a Folds of as many or
    more."""

    base: Folds
    changed: dict[int, Fold | None]
    covered: int

    def get(self, kind: int) -> Fold | None:
        return self.changed[kind] if kind in self.changed else self.base.folds.get(kind)

    def repeated(self) -> list[Fold]:
        """The folds, biggest first (of two as big, the newer)."""
        found = (self.get(kind) for kind in self.base.folds)
        return sorted(
            (fold for fold in found if fold is not None),
            key=lambda fold: (-fold.count, -fold.last_at),
        )


_FOLDS: dict[tuple[str, str], Folds] = {}  # (workspace db, agent) -> its folds
_FOLDS_LOCK = threading.Lock()
# Folding this many entries at once (a large memory's first block) frees tens of
# megabytes of passing strings: given back to the system after it.
TRIM_AFTER_FOLDING = 20_000


def folds_for(owner: str, agent: str, entries: Sequence[Entry], upto: int) -> FoldsView:
    """The folds of entries[:upto], kept between calls for (owner, agent)."""
    with _FOLDS_LOCK:
        folds = _FOLDS.get((owner, agent))
        had = 0 if folds is None else folds.covered
        if folds is None or not folds.extend(entries, upto):
            folds, had = Folds(), 0
            folds.extend(entries, upto)
        _FOLDS[(owner, agent)] = folds
        view = folds.upto(entries, upto)
    if upto - had >= TRIM_AFTER_FOLDING:
        give_back_freed_memory()
    return view


@dataclass
class Digest:
    lines: list[str]  # the note first, then a line per fold or sampled entry
    represented: int  # entries these lines stand for
    covered: int  # entries the digest is of
    texts: list[str]  # what the lines show, without counts and dates (for a model)


def _cut(text: str) -> str:
    text = " ".join(escape_content(text).split())
    return text if len(text) <= LINE_CHARS else text[: LINE_CHARS - 1].rstrip() + "…"


def _fold_line(fold: Fold) -> str:
    span = f"{fold.first.ts} … {fold.last.ts}" if fold.first.ts and fold.last.ts else ""
    when = f" [{span}]" if span else ""
    return f"- ×{fold.count}{when} {_cut(fold.last.content)}"


def _entry_line(entry: Entry) -> str:
    return f"- [{entry.ts}] {_cut(entry.content)}" if entry.ts else f"- {_cut(entry.content)}"


def digest(folds: FoldsView, entries: Sequence[Entry], max_chars: int, shown: set[str]) -> Digest:
    """The digest of entries[:folds.covered] within max_chars (lines with their breaks);
    entries in ``shown`` (of that span) are in the block whole already and not sampled
    again."""
    count = folds.covered
    note = DIGEST_NOTE.format(count=count - len(shown))
    room = max_chars - len(note) - 1
    lines, texts, represented = [note], [], 0
    if count == 0 or room <= 0:
        return Digest([], 0, count, [])
    for fold in folds.repeated():
        line = _fold_line(fold)
        if len(line) + 1 > room:
            continue
        lines.append(line)
        texts.append(_cut(fold.last.content))
        represented += fold.count
        room -= len(line) + 1
    stride = 1
    while count // stride > SAMPLE_SLOTS:
        stride *= 2  # positions stay put while the span grows, until it doubles
    for position in range(0, count, stride):
        entry = entries[position]
        if folds.get(kind_of(entry.content)) is not None or entry.entry_id in shown:
            continue
        line = _entry_line(entry)
        if len(line) + 1 > room:
            if room < 40:
                break
            continue
        lines.append(line)
        texts.append(_cut(entry.content))
        represented += 1
        room -= len(line) + 1
    if len(lines) == 1:
        return Digest([], 0, count, [])
    return Digest(lines, represented, count, texts)
