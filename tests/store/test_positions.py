"""The compact maps a large memory keeps: intmap.IntMap and store/positions.py."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oryxmem import intmap
from oryxmem.intmap import IntMap
from oryxmem.store.format import ARCHIVAL, Entry, EntryIds
from oryxmem.store.positions import EntryPositions

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


def test_entry_positions_find_every_id_as_a_dict_of_them_would(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ids of first copies (16 hex digits) kept as numbers, those of repeats and any
    other id (a prefix int() would read, capitals) as they are; grown in steps."""
    monkeypatch.setattr(intmap, "MERGE_AT", 5)
    ids = EntryIds()
    rng = random.Random(5)
    texts = [f"entry {rng.randrange(40)}" for _ in range(120)]
    made = [ids.allocate(ARCHIVAL, None, text) for text in texts]
    made += ["0x" + "1" * 14, "ABCDEF0123456789", "+123456789abcdef", "1" * 16]
    assert any("-" in entry_id for entry_id in made)
    # a parsed file's archival entries, taken in as they grow (one by one at first)
    entries = [Entry(ARCHIVAL, None, str(at), entry_id) for at, entry_id in enumerate(made)]
    positions = EntryPositions()
    for upto in (*range(8), 9, 10, 60, len(entries), len(entries)):
        positions.follow(entries[:upto])
        assert dict(positions) == {e.entry_id: at for at, e in enumerate(entries[:upto])}
    model = {entry_id: at for at, entry_id in enumerate(made)}
    assert len(positions) == len(model) and dict(positions) == model
    assert all(positions[entry_id] == at for entry_id, at in model.items())
    assert "0" * 16 not in positions and positions.get("2" * 16) is None
    with pytest.raises(KeyError):
        positions["0x" + "2" * 14]
