"""The compact maps a large memory keeps: intmap.IntMap, and a parsed file's columns of
entries finding their ids (store/column.py)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oryxmem import intmap
from oryxmem.intmap import IntMap
from oryxmem.store.format import (
    ARCHIVAL,
    NewEntry,
    append_at_end,
    new_file_text,
    numbered,
    parse,
    plan_entries,
    record_appended_many,
)

OPS = st.lists(
    st.tuples(
        st.sampled_from(["set", "pop", "settle"]),
        st.integers(-(2**63), 2**63 - 1) | st.integers(-3, 3),
        st.integers(0, 2**40),
    ),
    max_size=60,
)


@settings(max_examples=200)
@given(OPS)
def test_an_intmap_answers_as_a_dict_would_whatever_is_sorted_into_its_arrays(
    ops: list[tuple[str, int, int]],
) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(intmap, "MERGE_AT", 3)
        kept, model = IntMap(), {}
        for op, key, value in ops:
            if op == "set":
                kept.set(key, value)
                model[key] = value
            elif op == "pop":
                assert kept.pop(key) == model.pop(key, None)
            else:
                kept.settle()
            assert len(kept) == len(model)
        assert kept.items() == model
        assert all(kept.get(key) == value for key, value in model.items())
        assert all(kept.get(key) is None for _, key, _ in ops if key not in model)


def test_an_intmap_refuses_a_negative_value() -> None:
    with pytest.raises(ValueError, match=">= 0"):
        IntMap().set(1, -1)


def test_a_files_ids_are_found_where_they_are_as_the_file_grows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ids of first copies (16 hex digits) kept as numbers in the compact map, those of
    repeats beside them; grown by appends one at a time, then in steps; an entries()
    prefix keeps its length while the file grows; strings that are no id are not found."""
    monkeypatch.setattr(intmap, "MERGE_AT", 5)
    rng = random.Random(5)
    texts = [f"entry {rng.randrange(40)}" for _ in range(120)]
    doc = parse(new_file_text())
    steps = [*([1] * 8), 2, 10, 50, 49]
    taken = 0
    for step in steps:
        batch = [NewEntry(ARCHIVAL, None, text) for text in texts[taken : taken + step]]
        added = plan_entries(doc, batch)
        tail = append_at_end(doc, batch)
        assert tail is not None
        before = doc.archival.upto(len(doc.archival))
        record_appended_many(doc, tail, added)
        taken += step
        assert len(before) == taken - step and list(before) == list(doc.archival)[: taken - step]
        expected = numbered(NewEntry(ARCHIVAL, None, text) for text in texts[:taken])
        assert list(doc.archival) == expected
        positions = doc.archival.upto(taken).positions()
        assert dict(positions) == {e.entry_id: at for at, e in enumerate(expected)}
        assert all(
            doc.entry_lines[e.entry_id] == doc.archival.at[at] for at, e in enumerate(expected)
        )
    assert any("-" in entry.entry_id for entry in doc.archival)
    assert parse(doc.text) == doc
    positions = doc.archival.upto(60).positions()
    late = doc.archival[100].entry_id
    assert (late in positions) == (doc.archival.position(late) < 60)
    for other in (
        "0x" + "1" * 14,
        "ABCDEF0123456789",
        "+123456789abcdef",
        "1" * 16,
        "1" * 16 + "-0",
    ):
        assert other not in positions and other not in doc.entry_lines
        with pytest.raises(KeyError):
            positions[other]
