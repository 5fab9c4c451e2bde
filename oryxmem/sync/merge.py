"""The three-way merge of one MEMORY.md, by entry: what ``merge=oryxmem`` runs.

Git gives the common ancestor (base) and the two sides. Each file is read into its
sections (the text before the first heading, then each heading with the lines under it),
and each section into items: an entry is its id (scope, time, content, and an ordinal
for exact repeats, as everywhere else); any other line is its text and how many times
that text came before it in the section.

- An item is in the result when the side that changed it (against the base) has it, or
  when neither did and both have it: added on either side -> in, once; removed on one
  side and left alone on the other -> out. Archival is therefore a set, and core merges
  per entry.
- An entry a tombstone names is out, whichever side still has it.
- The order: the items both sides keep are the fixed points (the order of the side that
  moved them, else ours); what each side added between two fixed points is merged by
  time, then text. The result does not depend on which side is "ours" unless a side
  reordered lines, and is the same bytes on every machine for the same inputs.
- The same core entry (same time) rewritten differently on both sides is a true
  conflict: both versions stay, as two entries, and the merge reports it. No conflict
  markers are ever written.

A file with conflict markers in any version is not merged (MergeRefused).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from oryxmem.store.format import (
    CORE,
    EntryIds,
    conflict_line_numbers,
    heading_scope,
    parse_entry_body,
)
from oryxmem.store.tombstones import NO_TIME, Stone

Key = str  # a line's text, with "\0" and its ordinal after the first repeat in its section


class MergeRefused(Exception):
    """A version that cannot be merged by entry (it holds git conflict markers)."""


@dataclass(frozen=True)
class Conflict:
    """One core entry rewritten differently on both sides: both versions were kept."""

    ts: str
    base: str
    ours: str
    theirs: str


@dataclass
class MergeResult:
    text: str
    conflicts: list[Conflict] = field(default_factory=list)
    dropped: int = 0  # entries left out because a tombstone names them


@dataclass
class _Section:
    key: Key
    heading: str | None  # the heading line's text; None for the text before any heading
    scope: str | None
    items: list[Key] = field(default_factory=list)


def _read(text: str, what: str) -> dict[Key, _Section]:
    """A version's sections, in order, by key; each with its lines as keys. One pass,
    no entry parsing: a line is its own key (an entry's line says what identifies it)."""
    if conflict_line_numbers(text):
        lines = ", ".join(map(str, conflict_line_numbers(text)))
        raise MergeRefused(f"{what} has git conflict markers (lines {lines})")
    section = _Section("preamble", None, None)
    sections = {section.key: section}
    items = section.items
    seen: dict[str, int] = {}
    bodies = text.split("\n")
    if bodies[-1] == "":
        bodies.pop()  # the final newline
    if "\r" in text:
        bodies = [body[:-1] if body.endswith("\r") else body for body in bodies]
    for body in bodies:
        if body[:1] == "#":
            is_heading, scope = heading_scope(body)
            if is_heading:
                label = f"scope:{scope}" if scope else f"heading:{body.strip()}"
                while label in sections:
                    label += "\0"
                section = _Section(label, body, scope)
                sections[label] = section
                items, seen = section.items, {}
                continue
        count = seen.get(body)
        if count is None:
            seen[body] = 1
            items.append(body)
        else:
            seen[body] = count + 1
            items.append(f"{body}\0{count}")
    return sections


def _body(key: Key) -> str:
    return key.partition("\0")[0]


def _entry(key: Key, scope: str | None) -> tuple[str | None, str] | None:
    """(time, content) when the line is an entry of a memory section."""
    return parse_entry_body(_body(key)) if scope else None


def _kept(base: set[Key], ours: set[Key], theirs: set[Key]) -> set[Key]:
    """Three-way presence: the side that changed an item wins; unchanged, it stays."""
    return (ours & theirs) | (ours - base) | (theirs - base)


def _weave(
    ours: Sequence[Key],
    theirs: Sequence[Key],
    base: Sequence[Key],
    sort_key: Callable[[Key], tuple[str, str]],
) -> list[Key]:
    """Both sides' kept items in one order: the common ones as fixed points, each side's
    own items between them merged by time, then text."""
    common = set(ours).intersection(theirs)
    primary, secondary = _who_leads(ours, theirs, base, common)
    runs = _runs_after(secondary, common)
    out: list[Key] = []
    run: list[Key] = []
    anchor: Key | None = None
    for key in primary:
        if key not in common:
            run.append(key)
            continue
        if run or anchor in runs:
            out += _merge_runs(run, runs.pop(anchor, []), sort_key)
        out.append(key)
        anchor, run = key, []
    out += _merge_runs(run, runs.pop(anchor, []), sort_key)
    for leftover in runs.values():  # anchored on a common item placed elsewhere
        out += leftover
    return out


def _who_leads(
    ours: Sequence[Key], theirs: Sequence[Key], base: Sequence[Key], common: set[Key]
) -> tuple[Sequence[Key], Sequence[Key]]:
    """(primary, secondary): ours, unless only theirs moved lines (its order stands)."""
    ours_common = [key for key in ours if key in common]
    if ours_common == [key for key in theirs if key in common]:
        return ours, theirs
    if ours_common == [key for key in base if key in common]:
        return theirs, ours
    return ours, theirs


def _runs_after(keys: Sequence[Key], common: set[Key]) -> dict[Key | None, list[Key]]:
    """Each run of a side's own items, by the common item it follows (None: the start)."""
    runs: dict[Key | None, list[Key]] = {}
    anchor: Key | None = None
    for key in keys:
        if key in common:
            anchor = key
        else:
            runs.setdefault(anchor, []).append(key)
    return runs


def _merge_runs(
    a: list[Key], b: list[Key], sort_key: Callable[[Key], tuple[str, str]]
) -> list[Key]:
    if not b or not a:
        return a or b
    out: list[Key] = []
    i = j = 0
    while i < len(a) and j < len(b):
        if sort_key(b[j]) < sort_key(a[i]):
            out.append(b[j])
            j += 1
        else:
            out.append(a[i])
            i += 1
    return out + a[i:] + b[j:]


def merge_memory(
    base_text: str,
    ours_text: str,
    theirs_text: str,
    tombstones: Mapping[str, Stone] | None = None,
) -> MergeResult:
    """The merged MEMORY.md (LF line endings, a final newline) and what it had to keep
    twice. Raises MergeRefused for a version with conflict markers."""
    base, ours, theirs = (
        _read(base_text, "base"),
        _read(ours_text, "ours"),
        _read(theirs_text, "theirs"),
    )
    kept = _kept(set(base), set(ours), set(theirs))
    kept |= {key for key in (*ours, *theirs) if _added_to(key, base, ours, theirs)}
    kept.add("preamble")
    order = _weave(
        [key for key in ours if key in kept],
        [key for key in theirs if key in kept],
        list(base),
        lambda key: ("", key),
    )
    result = MergeResult("")
    lines: list[str] = []
    for key in order:
        b, o, t = base.get(key), ours.get(key), theirs.get(key)
        heading = _merged_heading(b, o, t)
        if heading is not None:
            lines.append(heading)
        lines += _merge_section(b, o, t, result)
    if tombstones:
        lines = _without(lines, tombstones, result)
    result.text = "".join(f"{line}\n" for line in lines)
    return result


def _added_to(
    key: Key, base: dict[Key, _Section], ours: dict[Key, _Section], theirs: dict[Key, _Section]
) -> bool:
    """A section one side removed while the other added to it is kept: nothing is lost."""
    before = set(base[key].items) if key in base else set()
    return any(key in side and not before.issuperset(side[key].items) for side in (ours, theirs))


def _merged_heading(
    base: _Section | None, ours: _Section | None, theirs: _Section | None
) -> str | None:
    texts = [s.heading if s is not None else None for s in (base, ours, theirs)]
    if texts[1] is None or texts[2] is None:
        return texts[1] if texts[2] is None else texts[2]
    if texts[1] == texts[2] or texts[2] == texts[0]:
        return texts[1]
    if texts[1] == texts[0]:
        return texts[2]
    return min(texts[1], texts[2])  # both renamed it: either, the same on every machine


def _merge_section(
    base: _Section | None, ours: _Section | None, theirs: _Section | None, result: MergeResult
) -> list[str]:
    b_items = base.items if base else []
    o_items = ours.items if ours else []
    t_items = theirs.items if theirs else []
    b_set, o_set, t_set = set(b_items), set(o_items), set(t_items)
    kept = _kept(b_set, o_set, t_set)
    scope = (ours or theirs or base).scope  # type: ignore[union-attr]

    def sort_key(key: Key) -> tuple[str, str]:
        entry = _entry(key, scope)
        return ((entry[0] or "") if entry else "", key)

    order = _weave(
        [key for key in o_items if key in kept],
        [key for key in t_items if key in kept],
        b_items,
        sort_key,
    )
    if scope == CORE and base is not None:
        result.conflicts += _conflicts(b_items, o_set, t_set, order, scope)
    return [_body(key) for key in order]


def _conflicts(
    base_items: Iterable[Key],
    ours: Collection[Key],
    theirs: Collection[Key],
    merged: Iterable[Key],
    scope: str,
) -> list[Conflict]:
    """Core entries both sides removed and each wrote anew, differently, at the same time."""
    gone: dict[str, str] = {}
    for key in base_items:
        if key not in ours and key not in theirs:
            entry = _entry(key, scope)
            if entry is not None and entry[0]:
                gone.setdefault(entry[0], entry[1])
    if not gone:
        return []
    mine: dict[str, str] = {}
    yours: dict[str, str] = {}
    for key in merged:
        if (key in ours) == (key in theirs):
            continue
        entry = _entry(key, scope)
        if entry is not None and entry[0] in gone:
            (mine if key in ours else yours).setdefault(entry[0], entry[1])
    return [
        Conflict(ts, old, mine[ts], yours[ts])
        for ts, old in sorted(gone.items())
        if ts in mine and ts in yours
    ]


def _without(lines: list[str], stones: Mapping[str, Stone], result: MergeResult) -> list[str]:
    """The lines without the entries the tombstones name, by the ids the file gives them.
    Only the lines with a tombstoned entry's time are hashed. An id ``K-j`` (the j-th
    exact repeat) leaves at most j copies of that entry."""
    times = {stone.ts if stone.ts != NO_TIME else None for stone in stones.values()}
    ids = EntryIds()
    kept_copies: dict[str, int] = {}
    for entry_id in stones:
        key, _, ordinal = entry_id.partition("-")
        kept_copies[key] = min(kept_copies.get(key, 1 << 30), int(ordinal or 0))
    scope: str | None = None
    out = []
    for line in lines:
        if line.startswith("#"):
            is_heading, opened = heading_scope(line)
            if is_heading:
                scope = opened
        elif scope is not None and _stamp(line) in times:
            entry = parse_entry_body(line)
            if entry is not None:
                entry_id = ids.allocate(scope, entry[0], entry[1])
                key, _, ordinal = entry_id.partition("-")
                if key in kept_copies and int(ordinal or 0) >= kept_copies[key]:
                    result.dropped += 1
                    continue
        out.append(line)
    return out


def _stamp(line: str) -> str | None:
    """An entry line's time, by position (what parse_entry_body would find), else None."""
    return line[3:22] if len(line) > 23 and line[2] == "[" and line[22] == "]" else None
