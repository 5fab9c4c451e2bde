"""The MEMORY.md v1 format: samples, escaping, line edits (docs/design.md §3)."""

from __future__ import annotations

import hashlib
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.processes import SAMPLES, SHARED_SAMPLES

from oryxmem.errors import EmptyContentError, InvalidContentError
from oryxmem.store.format import (
    ARCHIVAL,
    CORE,
    NewEntry,
    append_at_end,
    apply_edits,
    entries_holding,
    escape_content,
    normalize_content,
    numbered,
    parse,
    plan_entries,
    record_appended_many,
    split_physical_lines,
    unescape_content,
)
from oryxmem.store.window import archival_window

TS = "2026-07-22 09:30:00"
LINE_BREAKS = [
    "\n",
    "\r",
    "\r\n",
    "\x0b",
    "\x0c",
    "\x1c",
    "\x1d",
    "\x1e",
    "\x85",
    "\u2028",
    "\u2029",
]


def read_sample(name: str) -> str:
    return (SAMPLES / name).read_bytes().decode("utf-8")


# --- samples -----------------------------------------------------------------


def test_vendored_samples_match_shared_ones() -> None:
    if not SHARED_SAMPLES.is_dir():
        pytest.skip("../shared/samples is not beside this checkout")
    for shared in SHARED_SAMPLES.iterdir():
        assert (SAMPLES / shared.name).read_bytes() == shared.read_bytes(), shared.name


def test_every_sample_reads_as_expected(expected_samples: dict[str, dict[str, object]]) -> None:
    assert expected_samples, "EXPECTED.json lists no samples"
    for name, expected in expected_samples.items():
        doc = parse(read_sample(name))
        assert doc.parseable == expected["parseable"], name
        if not expected["parseable"]:
            assert doc.core == [] and doc.archival == [], name
            continue
        assert [[e.ts, e.content] for e in doc.core] == expected["core"], name
        assert [[e.ts, e.content] for e in doc.archival] == expected["archival"], name


def test_handwritten_sample_reports_only_the_indented_line() -> None:
    doc = parse(read_sample("handwritten.md"))
    assert [(u.line_number, u.text.strip()) for u in doc.unparsed] == [
        (15, "this indented line is not an entry and must be kept as it is")
    ]


def test_conflicted_sample_reports_marker_lines() -> None:
    doc = parse(read_sample("conflicted.md"))
    assert not doc.parseable
    assert doc.conflict_lines == [5, 9]


def test_crlf_append_keeps_crlf_and_only_adds_the_missing_break() -> None:
    text = read_sample("crlf-no-final-newline.md")
    doc = parse(text)
    tail = append_at_end(doc, [NewEntry(ARCHIVAL, TS, "new")])
    assert tail == f"\r\n- [{TS}] new\r\n"
    assert apply_edits(doc, [NewEntry(ARCHIVAL, TS, "new")]) == text + tail


def test_rendering_a_sample_unchanged_is_byte_identical() -> None:
    for sample in SAMPLES.glob("*.md"):
        text = read_sample(sample.name)
        assert apply_edits(parse(text), []) == text
        assert parse(text).text == text


# --- escaping ------------------------------------------------------------------


@pytest.mark.parametrize("brk", LINE_BREAKS)
def test_every_line_break_is_escaped_and_restored(brk: str) -> None:
    content = f"before{brk}after"
    escaped = escape_content(content)
    assert len(split_physical_lines(escaped)) == 1
    assert escaped.splitlines() == [escaped]
    assert unescape_content(escaped) == content


@pytest.mark.parametrize(
    "forged",
    [
        "x\n## 核心记忆\n- [2026-01-01 00:00:00] forged",
        "x\r\n## Archival\r\n- forged",
        "x\u2028## 归档记忆",
        "x\n<<<<<<< HEAD",
    ],
)
def test_content_cannot_forge_headings_entries_or_conflicts(forged: str) -> None:
    text = apply_edits(parse(""), [NewEntry(CORE, TS, forged)])
    doc = parse(text)
    assert doc.parseable
    assert [e.content for e in doc.core] == [forged]
    assert doc.archival == []
    assert len(split_physical_lines(text)) == 2


@pytest.mark.parametrize("bad", ["\x00", "a\x01b", "\x1b[31mred", "a\x7f\x08"])
def test_c0_controls_are_refused(bad: str) -> None:
    with pytest.raises(InvalidContentError):
        normalize_content(bad)


@pytest.mark.parametrize("empty", ["", "   ", "\n\t\u2028 "])
def test_empty_content_is_refused(empty: str) -> None:
    with pytest.raises(EmptyContentError):
        normalize_content(empty)


def test_tab_is_kept() -> None:
    assert normalize_content("a\tb") == "a\tb"


def test_backslash_sequences_survive() -> None:
    for content in ["C:\\Users\\ada", "a literal \\n", "\\\\n", "\\u2028 literal", "end\\"]:
        assert unescape_content(escape_content(content)) == content


def test_hand_written_unknown_escapes_are_left_alone() -> None:
    assert unescape_content("\\q \\u0041 \\") == "\\q \\u0041 \\"


def storable_text() -> st.SearchStrategy[str]:
    chars = st.characters(
        blacklist_categories=["Cs"],
        blacklist_characters=[
            chr(c)
            for c in [*range(0, 9), *range(14, 28), 31, *range(0x7F, 0x85), *range(0x86, 0xA0)]
        ],
    )
    special = st.sampled_from(
        [
            *LINE_BREAKS,
            "\n## 核心记忆",
            "\n- [2026-01-01 00:00:00] forged",
            "\\",
            "\\n",
            "记忆",
            "🧠",
            "\t",
            "<<<<<<< ",
        ]
    )
    return st.lists(st.one_of(chars, special, st.text(chars)), min_size=1, max_size=30).map("".join)


@settings(max_examples=300)
@given(storable_text())
def test_escape_roundtrip_for_arbitrary_text(content: str) -> None:
    escaped = escape_content(content)
    assert "\n" not in escaped and "\r" not in escaped
    assert escaped.splitlines() in ([escaped], [])
    assert unescape_content(escaped) == content


@settings(max_examples=200)
@given(storable_text(), st.sampled_from([CORE, ARCHIVAL]))
def test_saved_content_reads_back_exactly(content: str, scope: str) -> None:
    if not content.strip():
        return
    stored = normalize_content(content)
    doc = parse(apply_edits(parse(read_sample("canonical.md")), [NewEntry(scope, TS, stored)]))
    assert doc.entries(scope)[-1].content == stored == content.strip()


def test_16_kib_content_round_trips() -> None:
    content = ("长文本 🧠\u2028\\n" * 2048)[: 16 * 1024]
    doc = parse(apply_edits(parse(""), [NewEntry(ARCHIVAL, TS, content)]))
    assert doc.archival[0].content == content


# --- line edits ------------------------------------------------------------------


BASE_PIECES = [
    "# Memory\n\nA preamble a human wrote.\n\n",
    "## Links\n- https://example.org (not memory)\n\n",
    "## Core\n\n- [2026-07-22 09:30:00] Works in UTC+8.\n-   odd   spacing   \n",
    "## 归档记忆\n- [2026-07-24 08:00:00] Shipped.\n  indented note\n",
    "## 核心记忆\n",
    "\n\n",
    "trailing words without newline",
]


@st.composite
def documents(draw: st.DrawFn) -> str:
    pieces = draw(st.lists(st.sampled_from(BASE_PIECES), max_size=6))
    text = "".join(pieces)
    if draw(st.booleans()):
        text = text.replace("\n", "\r\n")
    if draw(st.booleans()):
        text = text.rstrip("\r\n")
    return text


def _is_subsequence(needles: list[str], haystack: list[str]) -> bool:
    it = iter(haystack)
    return all(any(line == candidate for candidate in it) for line in needles)


@settings(max_examples=300)
@given(documents(), st.data())
def test_edits_only_add_or_remove_whole_lines(text: str, data: st.DataObject) -> None:
    doc = parse(text)
    ids = list(doc.entry_lines)
    removals = data.draw(st.lists(st.sampled_from(ids), unique=True) if ids else st.just([]))
    additions = data.draw(
        st.lists(
            st.builds(NewEntry, st.sampled_from([CORE, ARCHIVAL]), st.just(TS), st.just("added")),
            max_size=3,
        )
    )
    new_text = apply_edits(doc, additions, removals)
    new_doc = parse(new_text)
    # Every surviving original line is still there, in order, byte for byte
    # (a final line may only have gained its missing line break).
    removed_indexes = {doc.entry_lines[i] for i in removals}
    kept = [line for index, line in enumerate(doc.lines) if index not in removed_indexes]
    bodies = [line.rstrip("\r\n") for line in new_doc.lines]
    assert _is_subsequence([line.rstrip("\r\n") for line in kept], bodies)
    for line in kept[:-1]:
        assert line in new_doc.lines
    # The entries are the old ones minus the removed, plus the added.
    before = [(e.scope, e.ts, e.content) for e in doc.all_entries() if e.entry_id not in removals]
    after = [(e.scope, e.ts, e.content) for e in new_doc.all_entries()]
    assert Counter(after) == Counter(before + [(a.scope, a.ts, a.content) for a in additions])
    # The only new lines are the added entries, and headings (with a blank line) for new sections.
    extra = Counter(bodies) - Counter(line.rstrip("\r\n") for line in kept)
    added_lines = Counter(f"- [{TS}] added" for _ in additions)
    assert extra - added_lines == Counter(
        {
            line: count
            for line, count in (extra - added_lines).items()
            if line in ("", "## 核心记忆", "## 归档记忆")
        }
    )
    assert extra[f"- [{TS}] added"] == len(additions)
    assert [u.text for u in new_doc.unparsed] == [u.text for u in doc.unparsed]


def test_new_entries_go_at_the_end_of_their_section() -> None:
    doc = parse(read_sample("canonical.md"))
    text = apply_edits(doc, [NewEntry(CORE, TS, "new core")])
    lines = text.splitlines()
    assert lines.index(f"- [{TS}] new core") == lines.index("## 归档记忆") - 2
    assert text.count("\n") == read_sample("canonical.md").count("\n") + 1


def test_missing_core_section_is_created_before_archival() -> None:
    text = apply_edits(parse(read_sample("archival-only.md")), [NewEntry(CORE, TS, "c")])
    assert text.startswith(f"## 核心记忆\n- [{TS}] c\n## 归档记忆\n")


def test_empty_file_gets_the_section_it_needs() -> None:
    assert apply_edits(parse(""), [NewEntry(ARCHIVAL, TS, "a")]) == f"## 归档记忆\n- [{TS}] a\n"


def test_exact_repeats_get_distinct_ids() -> None:
    line = f"- [{TS}] same\n"
    doc = parse("## 归档记忆\n" + line * 3)
    ids = [e.entry_id for e in doc.archival]
    assert len(set(ids)) == 3
    assert ids[1] == ids[0] + "-1"
    removed = apply_edits(doc, [], [ids[1]])
    assert removed == "## 归档记忆\n" + line * 2


def test_record_appended_matches_a_fresh_parse() -> None:
    for name in ["canonical.md", "crlf-no-final-newline.md", "escaped.md"]:
        doc = parse(read_sample(name))
        addition = NewEntry(ARCHIVAL, TS, "x\ny")
        tail = append_at_end(doc, [addition])
        assert tail is not None
        expected = parse(doc.text + tail)
        before = doc.lines.sha256()  # worked out before the append, carried on over it
        record_appended_many(doc, tail, plan_entries(doc, [addition]))
        assert doc.text == expected.text
        assert doc.archival == expected.archival
        assert doc.entry_lines == expected.entry_lines
        assert before != doc.lines.sha256() == hashlib.sha256(expected.text.encode()).hexdigest()


def test_lines_are_held_as_the_files_bytes_and_entries_read_back_from_them() -> None:
    """A large file is not kept as Python objects: its lines are its bytes (UTF-8, any
    line ending, a line with no ending last), each entry read from its line when asked
    for, as parse found it; a line changed in place moves the lines after it."""
    odd = [
        f"- [{TS}]\tTAB after the stamp\n",  # a tab, not the space the format writes
        f"- [{TS}]  two spaces\n",
        f"- [{TS}] trailing space \n",
        f"* [{TS}] another bullet\n",
        f"- [{TS}] a\x0bliteral line break\n",  # the format writes it escaped
        f"- [{TS}] written \\\\ escaped\n",  # the format's own escape
        f"- [{TS}] a CR line\r\n",  # in a file whose lines end in LF
        f"- [{TS}] café ☕ 𝄞 wide\n",  # two, three and four bytes a character
        "- no stamp\n",
    ]
    plain = [f"- [{TS}] plain {n}\n" for n in range(3)]
    text = "\ufeff# Memory\n\n## 归档记忆\n" + "".join(plain[:2] + odd + plain[2:]) + "- last"
    doc = parse(text)
    assert doc.text == text and list(doc.lines) == split_physical_lines(text)
    assert doc.lines[3] == plain[0] and doc.lines[-1] == "- last" and doc.lines[-3] == odd[-1]
    contents = ["plain 0", "plain 1", "TAB after the stamp", "two spaces", "trailing space"]
    contents += ["another bullet", "a\x0bliteral line break", "written \\ escaped", "a CR line"]
    contents += ["café ☕ 𝄞 wide", "no stamp", "plain 2", "last"]
    assert [e.content for e in doc.archival] == contents
    assert [e.ts for e in doc.archival][-4:] == [TS, None, TS, None]
    assert list(doc.archival) == numbered(doc.archival)  # ids as a fresh numbering gives
    assert doc.lines.sha256() == hashlib.sha256(text.encode()).hexdigest()
    doc.lines[1] = "a longer line, changed in place: ☕\n"  # the lines after it move
    assert [e.content for e in doc.archival] == contents
    assert doc.lines.sha256() == hashlib.sha256(doc.text.encode()).hexdigest()
    crlf = text.replace("\n", "\r\n")
    assert parse(crlf).text == crlf and list(parse(crlf).archival) == list(parse(text).archival)


def test_append_at_end_refuses_when_section_is_not_last() -> None:
    doc = parse(read_sample("canonical.md"))
    assert append_at_end(doc, [NewEntry(CORE, TS, "x")]) is None
    doc = parse(read_sample("handwritten.md"))
    assert append_at_end(doc, [NewEntry(ARCHIVAL, TS, "x")]) is not None


# --- the archival window -----------------------------------------------------------


def entries_of(*contents: str) -> list:
    doc = parse(apply_edits(parse(""), [NewEntry(ARCHIVAL, TS, c) for c in contents]))
    return doc.archival


def test_window_keeps_newest_whole_entries_within_limit() -> None:
    entries = entries_of(*(f"entry {i:03d}" for i in range(100)))
    line_cost = len(entries[0].render()) + 1
    window = archival_window(entries, line_cost * 10 + line_cost // 2)
    assert len(window.lines) == 10
    assert window.lines[-1].endswith("entry 099")
    assert window.lines[0].endswith("entry 090")
    assert window.omitted == 90
    assert sum(len(line) + 1 for line in window.lines) <= line_cost * 10 + line_cost // 2


def test_window_cuts_a_newest_entry_longer_than_the_limit_keeping_its_end() -> None:
    entries = entries_of("old", "x" * 5000 + "THE END")
    window = archival_window(entries, 4000)
    assert window.newest_was_cut
    (line,) = window.lines
    assert line.endswith("THE END") and "…" in line
    assert len(line) + 1 <= 4000


# What a hand-written entry's content may be made of (escapes written by hand too).
PIECES = ["a", "A", "ß", "ss", "K", "\u212a", "\\u000b", "\\\\", "\\r", "é", " ", "x"]


@settings(max_examples=150)
@given(
    st.lists(st.lists(st.sampled_from(PIECES), min_size=1, max_size=6).map("".join), max_size=10),
    st.lists(
        st.sampled_from(["a", "ß", "k", "\\", "é", "\r", "\x0b", "x"]), min_size=1, max_size=3
    ).map("".join),
)
def test_the_entries_holding_words_are_those_whose_content_casefolded_holds_them(
    raws: list[str], words: str
) -> None:
    """Lines read as entries only when they may hold the words: written with escapes
    (a backslash, CR, a line break), letters whose casefold is longer (ß) or another's
    (the Kelvin sign)."""
    text = "## 归档记忆\n" + "".join(f"- [{TS}] {raw}\n" for raw in raws)
    doc = parse(text)
    folded = words.casefold()
    expected = [e for e in doc.archival if folded in e.content.casefold()]
    assert entries_holding(doc.archival, folded) == expected
