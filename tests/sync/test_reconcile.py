"""The pure three-way merge: example cases, and hypothesis over random edit sequences."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from oryxmem.store.format import ARCHIVAL, CORE, NewEntry, apply_edits, parse
from oryxmem.sync.reconcile import number_rows, reconcile

TS = "2026-07-22 09:30:00"


@dataclass
class Sides:
    """A MEMORY.md text and a table of rows, as the engine would hold them."""

    text: str = ""
    rows: list[list] = field(default_factory=list)  # [row_id, stored_id, scope, ts, content]
    agreed: list[str] | None = None
    agreed_items: Counter = field(default_factory=Counter)  # (scope, ts, content) agreed on
    next_row: int = 1

    def file_entries(self):
        return parse(self.text).all_entries()

    def row_states(self):
        return number_rows(tuple(r) for r in self.rows)

    def sync(self, protected=()):
        plan = reconcile(self.file_entries(), self.row_states(), self.agreed, protected)
        doc = parse(self.text)
        self.text = apply_edits(doc, plan.file_additions, plan.file_removals)
        deleted = set(plan.row_deletes)
        self.rows = [r for r in self.rows if r[0] not in deleted]
        stamps = dict(plan.row_restamps)
        for row in self.rows:
            if row[0] in stamps:
                row[1] = stamps[row[0]]
        for entry in plan.row_inserts:
            self.insert_row(entry.scope, entry.ts, entry.content, stored=entry.entry_id)
        self.agreed = plan.agreed
        self.agreed_items = self.multiset()[0]
        return plan

    def insert_row(self, scope, ts, content, stored=None):
        self.rows.append([self.next_row, stored, scope, ts, content])
        self.next_row += 1

    def file_add(self, scope, content, ts=TS):
        self.text = apply_edits(parse(self.text), [NewEntry(scope, ts, content)])

    def file_remove(self, index):
        entries = self.file_entries()
        if entries:
            self.text = apply_edits(parse(self.text), [], [entries[index % len(entries)].entry_id])

    def file_edit(self, index, content):
        entries = self.file_entries()
        if entries:
            old = entries[index % len(entries)]
            self.text = apply_edits(
                parse(self.text), [NewEntry(old.scope, old.ts, content)], [old.entry_id]
            )

    def row_delete(self, index):
        if self.rows:
            del self.rows[index % len(self.rows)]

    def row_update(self, index, content):
        if self.rows:
            self.rows[index % len(self.rows)][4] = content

    def multiset(self):
        file_side = Counter((e.scope, e.ts, e.content) for e in self.file_entries())
        row_side = Counter((r[2], r[3], r[4]) for r in self.rows)
        return file_side, row_side


def test_first_run_is_the_union() -> None:
    sides = Sides()
    sides.file_add(CORE, "in the file")
    sides.insert_row(ARCHIVAL, TS, "in the table")
    plan = sides.sync()
    assert not plan.file_removals and not plan.row_deletes
    file_side, row_side = sides.multiset()
    assert file_side == row_side and len(file_side) == 2


def test_each_side_add_and_remove_reaches_the_other() -> None:
    sides = Sides()
    sides.file_add(ARCHIVAL, "a")
    sides.sync()
    sides.insert_row(ARCHIVAL, TS, "from sql")
    sides.file_add(ARCHIVAL, "from editor")
    sides.sync()
    assert sides.multiset()[0] == sides.multiset()[1]
    assert len(sides.rows) == 3
    sides.row_delete(0)  # "a" deleted by another program
    sides.file_remove(1)  # "from sql"? no: removes the second entry of the file
    sides.sync()
    file_side, row_side = sides.multiset()
    assert file_side == row_side and len(file_side) == 1


def test_update_in_the_table_replaces_the_line() -> None:
    sides = Sides()
    sides.file_add(ARCHIVAL, "old words")
    sides.sync()
    sides.row_update(0, "new words")
    plan = sides.sync()
    assert [e.content for e in sides.file_entries()] == ["new words"]
    assert plan.file_removals and not plan.lost


def test_changed_on_both_sides_the_file_wins_and_the_loser_is_kept() -> None:
    sides = Sides()
    sides.file_add(ARCHIVAL, "original")
    sides.sync()
    sides.file_edit(0, "edited in the editor")
    sides.row_update(0, "edited in sql")
    plan = sides.sync()
    assert [e.content for e in sides.file_entries()] == ["edited in the editor"]
    assert [r[4] for r in sides.rows] == ["edited in the editor"]
    assert [entry.content for _, entry, _ in plan.lost] == ["edited in sql"]


def test_a_stale_buffer_drop_of_a_protected_entry_is_restored() -> None:
    sides = Sides()
    sides.file_add(ARCHIVAL, "old")
    sides.sync()
    sides.insert_row(ARCHIVAL, TS, "just saved by an agent")
    sides.sync()
    stale = sides.text
    new_id = sides.file_entries()[-1].entry_id
    sides.text = stale.replace(f"- [{TS}] just saved by an agent\n", "")  # the stale buffer
    plan = sides.sync(protected={new_id})
    assert [e.content for e in plan.restored] == ["just saved by an agent"]
    assert [e.content for e in sides.file_entries()] == ["old", "just saved by an agent"]
    sides.text = sides.text.replace(f"- [{TS}] just saved by an agent\n", "")  # deliberate, again
    sides.sync()
    assert [r[4] for r in sides.rows] == ["old"]


def test_exact_repeats_are_counted_not_merged() -> None:
    sides = Sides()
    for _ in range(3):
        sides.file_add(ARCHIVAL, "same")
    sides.sync()
    assert len(sides.rows) == 3
    sides.row_delete(0)
    sides.sync()
    assert [e.content for e in sides.file_entries()] == ["same", "same"]
    assert sides.sync().is_noop


EDITS = st.one_of(
    st.tuples(st.just("file_add"), st.sampled_from([CORE, ARCHIVAL]), st.sampled_from("abcde")),
    st.tuples(st.just("file_remove"), st.integers(0, 20)),
    st.tuples(st.just("file_edit"), st.integers(0, 20), st.sampled_from("vwxyz")),
    st.tuples(st.just("row_insert"), st.sampled_from([CORE, ARCHIVAL]), st.sampled_from("abcfg")),
    st.tuples(st.just("row_delete"), st.integers(0, 20)),
    st.tuples(st.just("row_update"), st.integers(0, 20), st.sampled_from("pqrxy")),
    st.tuples(st.just("sync")),
)


def apply_edit(sides: Sides, edit: tuple) -> None:
    kind, *args = edit
    if kind == "row_insert":
        sides.insert_row(args[0], TS, args[1])
    elif kind == "sync":
        sides.sync()
    else:
        getattr(sides, kind)(*args)


@settings(max_examples=400, deadline=None)
@given(st.lists(EDITS, max_size=25))
def test_random_edits_converge_and_reconcile_is_idempotent(edits: list[tuple]) -> None:
    sides = Sides()
    for edit in edits:
        apply_edit(sides, edit)
    before_file, before_rows = sides.multiset()
    agreed = sides.agreed_items
    plan = sides.sync()
    file_side, row_side = sides.multiset()
    assert file_side == row_side, "the two sides agree after one pass"
    assert Counter(e.entry_id for e in sides.file_entries()) == Counter(sides.agreed)
    assert sides.sync().is_noop, "a second pass changes nothing"
    lost = Counter((e.scope, e.ts, e.content) for _, e, _ in plan.lost)
    for item in before_file | before_rows | file_side:
        most = max(before_file[item], before_rows[item])
        assert file_side[item] <= most, "nothing is invented"
        removed_somewhere = before_file[item] < agreed[item] or before_rows[item] < agreed[item]
        if not removed_somewhere:
            assert file_side[item] + lost[item] >= most, f"{item} was lost"
