"""The merge of one MEMORY.md by entry (sync/merge.py), and TOMBSTONES files: examples,
and a property test over random histories of two and three clones."""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from oryxmem.store import tombstones
from oryxmem.store.format import entry_key, parse, render_entry_line
from oryxmem.store.tombstones import Stone
from oryxmem.sync.merge import merge_memory

HEAD = "# Memory\n"


def memory(core: list[tuple[str, str]], archival: list[tuple[str, str]]) -> str:
    lines = [HEAD, "## 核心记忆\n"]
    lines += [render_entry_line(ts, text) + "\n" for ts, text in core]
    lines += ["## 归档记忆\n"]
    lines += [render_entry_line(ts, text) + "\n" for ts, text in archival]
    return "".join(lines)


def contents(text: str, scope: str = "archival") -> list[str]:
    doc = parse(text)
    assert doc.parseable
    return [entry.content for entry in doc.entries(scope)]


WHEN = "2026-02-01T00:00:00Z"
BASE = memory([("2026-01-01 00:00:00", "name Ada")], [("2026-01-02 00:00:00", "a1")])


def test_both_sides_additions_each_once_in_time_order_and_symmetric() -> None:
    ours = BASE + render_entry_line("2026-01-03 00:00:00", "ours") + "\n"
    theirs = BASE + render_entry_line("2026-01-02 12:00:00", "theirs") + "\n"
    both = BASE + render_entry_line("2026-01-04 00:00:00", "same on both") + "\n"
    merged = merge_memory(BASE, ours, theirs)
    assert contents(merged.text) == ["a1", "theirs", "ours"]
    assert merged.text == merge_memory(BASE, theirs, ours).text  # the same bytes either way
    assert contents(merge_memory(BASE, both, both).text) == ["a1", "same on both"]
    assert "<<<<<<<" not in merged.text and not merged.conflicts


def test_a_removal_on_one_side_stays_removed() -> None:
    removed = memory([("2026-01-01 00:00:00", "name Ada")], [])
    added = BASE + render_entry_line("2026-01-05 00:00:00", "new") + "\n"
    assert contents(merge_memory(BASE, removed, added).text) == ["new"]
    assert contents(merge_memory(BASE, added, removed).text) == ["new"]


def test_a_core_entry_edited_differently_on_both_sides_keeps_both_and_reports() -> None:
    ours = BASE.replace("name Ada", "name Ada Lovelace")
    theirs = BASE.replace("name Ada", "name Ada King")
    merged = merge_memory(BASE, ours, theirs)
    assert sorted(contents(merged.text, "core")) == ["name Ada King", "name Ada Lovelace"]
    (conflict,) = merged.conflicts
    assert (conflict.base, conflict.ours, conflict.theirs) == (
        "name Ada",
        "name Ada Lovelace",
        "name Ada King",
    )
    one_side = merge_memory(BASE, ours, BASE)  # edited on one side only: no conflict
    assert contents(one_side.text, "core") == ["name Ada Lovelace"] and not one_side.conflicts


def test_tombstones_drop_an_entry_whichever_side_still_has_it() -> None:
    added = BASE + render_entry_line("2026-01-05 00:00:00", "secret plan") + "\n"
    doomed = next(e.entry_id for e in parse(added).archival if e.content == "secret plan")
    merged = merge_memory(BASE, added, added, {doomed: Stone(WHEN, "2026-01-05 00:00:00")})
    assert contents(merged.text) == ["a1"] and merged.dropped == 1


def test_text_outside_entries_is_kept_and_a_section_one_side_created() -> None:
    base = "# Notes\nsome words\n"
    ours = base + "## 归档记忆\n- [2026-01-01 00:00:00] o\n"
    theirs = "# Notes\nsome words\nmore words\n"
    merged = merge_memory(base, ours, theirs).text
    assert "more words\n" in merged and contents(merged) == ["o"]


def test_a_version_with_conflict_markers_is_refused() -> None:
    import pytest

    from oryxmem.sync.merge import MergeRefused

    with pytest.raises(MergeRefused):
        merge_memory(BASE, "<<<<<<< HEAD\n=======\n>>>>>>> x\n", BASE)


def test_tombstone_files_merge_as_a_sorted_union_with_the_earliest_time() -> None:
    a = tombstones.render({"0123456789abcdef": Stone("2026-01-02T00:00:00Z", "-")})
    b = tombstones.render(
        {
            "0123456789abcdef": Stone("2026-01-01T00:00:00Z", "-"),
            "fedcba9876543210": Stone("2026-01-03T00:00:00Z", "2026-01-01 00:00:00"),
        }
    )
    merged = tombstones.merge_texts(tombstones.HEADER, a, b)
    assert merged == tombstones.merge_texts(tombstones.HEADER, b, a)
    assert tombstones.parse(merged) == {
        "0123456789abcdef": Stone("2026-01-01T00:00:00Z", "-"),
        "fedcba9876543210": Stone("2026-01-03T00:00:00Z", "2026-01-01 00:00:00"),
    }


# --- the property: random histories of clones -----------------------------------------


Commits = dict[int, tuple[str, tuple[int, ...]]]


def ancestors(commits: Commits, start: int) -> set[int]:
    seen, todo = set(), [start]
    while todo:
        commit = todo.pop()
        if commit not in seen:
            seen.add(commit)
            todo += commits[commit][1]
    return seen


def base_text(commits: Commits, a: int, b: int, stones: dict[str, Stone]) -> str:
    """The merge base as git's ort strategy makes it: the best common ancestor, or, when
    there are several (a criss-cross), their merge, made the same way (a virtual base)."""
    common = ancestors(commits, a) & ancestors(commits, b)
    best = sorted(
        c for c in common if not any(c != d and c in ancestors(commits, d) for d in common)
    )
    virtual = best[0]
    for other in best[1:]:
        under = base_text(commits, virtual, other, stones)
        text = merge_memory(under, commits[virtual][0], commits[other][0], stones).text
        key = -len(commits)
        commits[key] = (text, (virtual, other))
        virtual = key
    return commits[virtual][0]


OPS = st.lists(
    st.tuples(
        st.sampled_from(["add", "add", "remove", "edit", "sync", "sync"]),
        st.integers(0, 2),  # which clone
        st.integers(0, 2),  # the other clone (for a sync), or which entry
        st.sampled_from(["core", "archival", "archival"]),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS, st.integers(2, 3), st.booleans())
@example(  # removed on one clone while the other added: the removal holds
    [
        ("add", 0, 0, "archival"),
        ("sync", 1, 0, "archival"),
        ("remove", 0, 0, "archival"),
        ("add", 1, 0, "archival"),
        ("sync", 1, 0, "archival"),
    ],
    2,
    False,
)
def test_random_histories_lose_resurrect_and_double_nothing(
    ops: list, clones: int, with_tombstones: bool
) -> None:
    """With tombstones, and without them (the three-way merge alone must hold too)."""
    commits: Commits = {0: (memory([], []), ())}
    heads = [0] * clones
    stones: list[dict[str, Stone]] = [{} for _ in range(clones)]
    added: dict[str, str] = {}  # entry id -> content, every entry ever added
    removed: set[str] = set()
    serial = 0

    def commit(clone: int, text: str, parents: tuple[int, ...]) -> None:
        nonlocal serial
        serial += 1
        commits[serial] = (text, parents)
        heads[clone] = serial

    for op, clone, other, scope in ops:
        clone %= clones
        text = commits[heads[clone]][0]
        doc = parse(text)
        entries = doc.entries(scope)
        if op == "add":
            serial_text = f"note {serial + 1} from clone {clone}"
            ts = f"2026-01-01 00:{serial // 60:02d}:{serial % 60:02d}"
            line = render_entry_line(ts, serial_text)
            lines = text.splitlines(keepends=True)
            at = lines.index("## 归档记忆\n") if scope == "core" else len(lines)
            lines.insert(at, line + "\n")
            new = "".join(lines)
            fresh = {e.entry_id for e in parse(new).all_entries()} - {
                e.entry_id for e in doc.all_entries()
            }
            (entry_id,) = fresh
            added[entry_id] = serial_text
            commit(clone, new, (heads[clone],))
        elif op in ("remove", "edit") and entries:
            victim = entries[other % len(entries)]
            lines = text.splitlines(keepends=True)
            index = doc.entry_lines[victim.entry_id]
            if op == "remove":
                del lines[index]
                removed.add(victim.entry_id)
                if with_tombstones:
                    stones[clone][victim.entry_id] = Stone(WHEN, victim.ts or "-")
            else:
                replacement = render_entry_line(victim.ts, victim.content + f" edited {serial}")
                lines[index] = replacement + "\n"
                new_id = entry_key(victim.scope, victim.ts, victim.content + f" edited {serial}")
                added[new_id] = victim.content + f" edited {serial}"
                removed.add(victim.entry_id)
                if with_tombstones:
                    stones[clone][victim.entry_id] = Stone(WHEN, victim.ts or "-")
            commit(clone, "".join(lines), (heads[clone],))
        elif op == "sync":
            source = other % clones
            if source == clone or heads[source] in ancestors(commits, heads[clone]):
                continue
            if with_tombstones:
                stones[clone] |= stones[source]
            if heads[clone] in ancestors(commits, heads[source]):
                heads[clone] = heads[source]  # a fast-forward
                continue
            merged = merge_memory(
                base_text(commits, heads[clone], heads[source], stones[clone]),
                text,
                commits[heads[source]][0],
                stones[clone],
            )
            assert "<<<<<<<" not in merged.text
            commit(clone, merged.text, (heads[clone], heads[source]))

    # Bring every clone together, twice round (as the sync loop does), then check.
    for _ in range(2):
        for a in range(clones):
            for b in range(clones):
                if a == b or heads[b] in ancestors(commits, heads[a]):
                    continue
                if with_tombstones:
                    stones[a] |= stones[b]
                if heads[a] in ancestors(commits, heads[b]):
                    heads[a] = heads[b]
                    continue
                merged = merge_memory(
                    base_text(commits, heads[a], heads[b], stones[a]),
                    commits[heads[a]][0],
                    commits[heads[b]][0],
                    stones[a],
                )
                commit(a, merged.text, (heads[a], heads[b]))
    final = {commits[head][0] for head in heads}
    assert len(final) == 1, "the clones converged on the same bytes"
    ids = Counter(e.entry_id for e in parse(final.pop()).all_entries())
    assert all(count == 1 for count in ids.values()), "none doubled"
    assert not (set(ids) & removed), "none resurrected"
    assert set(ids) == set(added) - removed, "none lost"
