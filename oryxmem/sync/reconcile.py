"""The three-way merge between a MEMORY.md and its rows, as a pure function.

Given the entries in the file, the rows in ``memory_entries`` and the ids of the
last state both sides agreed on, decide the edits for each side:

- added on one side -> added on the other;
- removed on one side and untouched on the other -> removed;
- changed on both sides -> the file wins, and the loser goes to history;
- no agreed state yet (first run, a deleted database) -> the union, nothing removed.

Identity is content: an entry's id is a hash of (scope, timestamp, content)
plus an ordinal for exact repeats. A row remembers the id it had when the sides
last agreed (``stored_id``), so an UPDATE by another program shows as "row r
went from X to Y", which is how a change on the database side is told apart
from an unrelated add and remove.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from oryxmem.store.format import Entry, EntryIds, numbered


@dataclass(frozen=True)
class RowState:
    """A row of ``memory_entries`` as the merge sees it."""

    row_id: int
    stored_id: str | None  # the id when the sides last agreed; None for a new row
    entry: Entry  # its current scope, ts and content, with the id they give


@dataclass
class Plan:
    """What reconcile decided. Applying it to both sides makes them agree on ``agreed``."""

    file_additions: list[Entry] = field(default_factory=list)
    file_removals: list[str] = field(default_factory=list)
    row_inserts: list[Entry] = field(default_factory=list)
    row_deletes: list[int] = field(default_factory=list)
    row_restamps: list[tuple[int, str]] = field(default_factory=list)
    lost: list[tuple[int, Entry, str]] = field(default_factory=list)  # row, loser, why
    restored: list[Entry] = field(default_factory=list)  # dropped by a stale editor buffer
    agreed: list[str] = field(default_factory=list)

    @property
    def changes_file(self) -> bool:
        return bool(self.file_additions or self.file_removals)

    @property
    def changes_rows(self) -> bool:
        return bool(self.row_inserts or self.row_deletes or self.row_restamps)

    @property
    def is_noop(self) -> bool:
        return not (self.changes_file or self.changes_rows)


def number_rows(rows: Iterable[tuple[int, str | None, str, str | None, str]]) -> list[RowState]:
    """RowStates from (row_id, stored_id, scope, ts, content) in order: ids with ordinals."""
    ids = EntryIds()
    return [
        RowState(row_id, stored_id, ids.entry(scope, ts, content))
        for row_id, stored_id, scope, ts, content in rows
    ]


def reconcile(
    file_entries: Sequence[Entry],
    rows: Sequence[RowState],
    agreed: Collection[str] | None,
    protected: Collection[str] = (),
    forgotten: Collection[str] = (),
) -> Plan:
    """Decide the edits that make the file and the rows agree. Pure; idempotent.

    ``protected`` names entries recently added from the socket or the database:
    if the file no longer has one, a stale editor buffer dropped it and it is
    put back rather than removed from the rows. ``forgotten`` names entries with a
    tombstone (store/tombstones.py): whichever side has one, it goes from both.
    """
    plan = Plan()
    base = set(agreed) if agreed is not None else None
    in_file = {entry.entry_id: entry for entry in file_entries}
    by_current: dict[str, RowState] = {}
    for row in rows:
        if row.entry.entry_id in by_current:  # cannot happen with numbered rows; be safe
            plan.row_deletes.append(row.row_id)
            continue
        by_current[row.entry.entry_id] = row

    # Which rows need their stored id changed is settled at the end (_settle_ids), once
    # the final numbering is known.
    for entry_id, row in by_current.items():
        if entry_id in forgotten:
            plan.row_deletes.append(row.row_id)  # came back (a merge, a restore): it goes
        elif entry_id not in in_file:
            _row_not_in_file(plan, row, base, in_file, protected)

    for entry_id, entry in in_file.items():
        if entry_id in forgotten:
            plan.file_removals.append(entry_id)
            continue
        if entry_id in by_current:
            continue
        if base is None or entry_id not in base:
            plan.row_inserts.append(entry)  # added in the file
        else:
            plan.file_removals.append(entry_id)  # no row holds it any more

    _settle_ids(plan, file_entries, rows)
    return plan


def _row_not_in_file(
    plan: Plan,
    row: RowState,
    base: set[str] | None,
    in_file: Mapping[str, Entry],
    protected: Collection[str],
) -> None:
    """What a row the file lacks becomes: a line of the file, a deletion, or a loss."""
    entry_id = row.entry.entry_id
    if base is None:  # first agreement: the union
        plan.file_additions.append(row.entry)
    elif row.stored_id == entry_id and entry_id in base:
        # Untouched in the database, gone from the file.
        if entry_id in protected:
            plan.restored.append(row.entry)
            plan.file_additions.append(row.entry)
        else:
            plan.row_deletes.append(row.row_id)
    elif (
        row.stored_id is not None
        and row.stored_id != entry_id
        and row.stored_id in base
        and row.stored_id not in in_file
        and row.stored_id not in protected
    ):
        # Changed on both sides: the file dropped what the database changed.
        why = "changed in the database and in the file; the file wins"
        plan.lost.append((row.row_id, row.entry, why))
        plan.row_deletes.append(row.row_id)
    else:
        # New in the database, or changed there while the file kept the old text.
        plan.file_additions.append(row.entry)


def _settle_ids(plan: Plan, file_entries: Sequence[Entry], rows: Sequence[RowState]) -> None:
    """Agreed ids and row stamps as they will be once the plan is applied.

    Removing one of several exact repeats renumbers the others, so the ids
    both sides agree on are computed from the final state, not the current one.
    """
    removed = set(plan.file_removals)
    final_file = [e for e in file_entries if e.entry_id not in removed] + plan.file_additions
    plan.agreed = [entry.entry_id for entry in numbered(final_file)]
    deleted = set(plan.row_deletes)
    surviving = [row for row in rows if row.row_id not in deleted]
    final_rows = numbered([row.entry for row in surviving] + plan.row_inserts)
    plan.row_restamps = [
        (row.row_id, final.entry_id)
        for row, final in zip(surviving, final_rows, strict=False)
        if row.stored_id != final.entry_id
    ]
    plan.row_inserts = final_rows[len(surviving) :]
