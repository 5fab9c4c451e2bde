"""One contract, three backends: MarkdownMemoryStore, SqliteMemoryStore and Mem0MemoryStore
(a real mem0.Memory, offline) answer alike."""

from __future__ import annotations

import importlib.util
import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oryxmem.backends.sqlite import SqliteMemoryStore
from oryxmem.config import Config
from oryxmem.errors import (
    ContentTooLongError,
    EmptyContentError,
    EmptyKeywordError,
    InvalidContentError,
    InvalidScopeError,
)
from oryxmem.fileio import FileLock
from oryxmem.store.base import LongTermMemoryStore, StoreLimits
from oryxmem.store.db import connect
from oryxmem.store.format import ARCHIVAL, CORE, escape_content
from oryxmem.store.indexdb import connect_index
from oryxmem.store.markdown import MarkdownMemoryStore
from oryxmem.workspace import Workspace

LIMITS = StoreLimits(archival_limit_chars=4000, max_content_chars=32768)


def ticking_clock() -> Iterator[str]:
    for n in itertools.count():
        yield f"2026-07-{22 + n // 86400:02d} {n // 3600 % 24:02d}:{n // 60 % 60:02d}:{n % 60:02d}"


def make_store(kind: str, folder: Path, agent: str = "coder") -> LongTermMemoryStore:
    clock = ticking_clock()
    if kind == "mem0":  # a real mem0.Memory, offline (oryxmem[mem0])
        if importlib.util.find_spec("mem0") is None:  # not imported: oryxmem imports it
            pytest.skip("oryxmem[mem0] is not installed")
        from oryxmem.backends.mem0 import Mem0MemoryStore
        from oryxmem.backends.mem0_link import EmbeddedLink

        (folder / ".oryxos").mkdir(parents=True, exist_ok=True)
        link = EmbeddedLink(Workspace(folder), Config.defaults())
        return Mem0MemoryStore(link, agent, clock=lambda: next(clock), limits=LIMITS)
    if kind == "markdown":
        return MarkdownMemoryStore(
            folder / "agents" / agent / "MEMORY.md",
            FileLock(folder / "run" / f"{agent}.lock"),
            clock=lambda: next(clock),
            limits=LIMITS,
        )
    rows_db = connect(folder / "oryxos.db")
    index_db = connect_index(folder / "oryxos.db")
    return SqliteMemoryStore(rows_db, index_db, agent, clock=lambda: next(clock), limits=LIMITS)


@pytest.fixture(params=["markdown", "sqlite", "mem0"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LongTermMemoryStore]:
    made = make_store(request.param, tmp_path)
    yield made
    link = getattr(made, "link", None)
    if link is not None:
        link.close()


def test_append_then_entries(store: LongTermMemoryStore) -> None:
    first = store.append("User's name is Ada.", CORE)
    store.append("  prefers concise answers  ")
    core, archival = store.entries()
    assert [e.content for e in core] == ["User's name is Ada."]
    assert [e.content for e in archival] == ["prefers concise answers"]
    assert first.ts == core[0].ts and first.entry_id == core[0].entry_id


def test_load_of_an_empty_store(store: LongTermMemoryStore) -> None:
    snapshot = store.load()
    assert snapshot.core == [] and snapshot.archival.lines == [] and snapshot.archival_total == 0


def test_load_keeps_core_whole_and_cuts_archival_to_newest(store: LongTermMemoryStore) -> None:
    big_core = "core fact " * 300  # 3,000 chars: core is never cut
    store.append(big_core, CORE)
    store.append(big_core + "again", CORE)
    for i in range(150):  # more than fit in 4,000 characters, and than mem0's default page
        store.append(f"archival entry number {i:04d}")
    snapshot = store.load()
    assert [e.content for e in snapshot.core] == [big_core.strip(), big_core + "again"]
    lines = snapshot.archival.lines
    assert lines[-1].endswith("archival entry number 0149")
    assert sum(len(line) + 1 for line in lines) <= 4000
    assert sum(len(line) + 1 for line in lines) + len(lines[0]) + 1 > 4000  # as many as fit
    assert snapshot.archival.omitted == 150 - len(lines)
    assert snapshot.archival_total == 150
    numbers = [int(line[-4:]) for line in lines]
    assert numbers == list(range(150 - len(lines), 150))


def test_load_cuts_a_huge_newest_entry_keeping_its_end(store: LongTermMemoryStore) -> None:
    store.append("older")
    store.append("y" * 9000 + " the end")
    snapshot = store.load()
    assert snapshot.archival.newest_was_cut
    assert snapshot.archival.lines[0].endswith("the end")


def test_recall_searches_the_whole_archival_section(store: LongTermMemoryStore) -> None:
    store.append("needle in the oldest entry")
    for i in range(150):  # more than mem0's default page of 100
        store.append(f"filler {i} " + "z" * 40)
    store.append("Needle again, newest")
    store.append("needle in core is not recalled", CORE)
    lines = store.recall("NEEDLE")
    assert len(lines) == 2
    assert lines[0].endswith("needle in the oldest entry")
    assert lines[1].endswith("Needle again, newest")
    assert lines[0].startswith("- [2026-")


@pytest.mark.parametrize(
    ("content", "keyword"),
    [
        ("用户喜欢简洁的回答", "简洁"),
        ("用户喜欢简洁的回答", "喜欢简洁的"),
        ("Straße in Berlin", "STRASSE"),
        ("ΣΊΣΥΦΟΣ", "σίσυφος"),
        ("a b", "a"),
        ("x", "X"),
        ("emoji 🧠 here", "🧠"),
        ("multi\nline", "i\nl"),
        ('quote "this"', '"this"'),
        ("percent 100% sure", "0% s"),
        ("under_score", "_"),
    ],
)
def test_recall_is_casefolded_substring_match(
    store: LongTermMemoryStore, content: str, keyword: str
) -> None:
    store.append("0123456789")
    store.append(content)
    assert [line.endswith(escape_content(content)) for line in store.recall(keyword)] == [True]


def test_recall_returns_oldest_first_and_escapes_lines(store: LongTermMemoryStore) -> None:
    store.append("cat one\nsecond line")
    store.append("cat two")
    assert store.recall("cat") == [
        f"- [{store.entries()[1][0].ts}] cat one\\nsecond line",
        f"- [{store.entries()[1][1].ts}] cat two",
    ]


def test_recall_of_nothing_found(store: LongTermMemoryStore) -> None:
    store.append("something")
    assert store.recall("absent") == []


@pytest.mark.parametrize(
    ("content", "scope", "error"),
    [
        ("", ARCHIVAL, EmptyContentError),
        ("  \n ", ARCHIVAL, EmptyContentError),
        ("nul\x00byte", ARCHIVAL, InvalidContentError),
        ("ok", "bogus", InvalidScopeError),
        ("x" * 40000, ARCHIVAL, ContentTooLongError),
    ],
)
def test_bad_saves_are_refused_and_change_nothing(
    store: LongTermMemoryStore, content: str, scope: str, error: type[Exception]
) -> None:
    store.append("kept")
    with pytest.raises(error):
        store.append(content, scope)
    assert [e.content for e in store.entries()[1]] == ["kept"]


def test_empty_keyword_is_refused(store: LongTermMemoryStore) -> None:
    with pytest.raises(EmptyKeywordError):
        store.recall("  ")


def test_exact_repeats_are_kept_apart(store: LongTermMemoryStore) -> None:
    a = store.append("same", ts="2026-07-22 09:30:00")
    b = store.append("same", ts="2026-07-22 09:30:00")
    assert a.entry_id != b.entry_id
    assert len(store.entries()[1]) == 2


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([CORE, ARCHIVAL]),
            st.text(
                st.characters(blacklist_categories=["Cs", "Cc"]) | st.sampled_from("\n\r\u2028\\"),
                min_size=1,
                max_size=40,
            ),
        ),
        max_size=12,
    ),
    st.text(st.characters(blacklist_categories=["Cs", "Cc"]), min_size=1, max_size=3),
)
def test_both_backends_answer_alike(
    tmp_path_factory: pytest.TempPathFactory, saves: list[tuple[str, str]], keyword: str
) -> None:
    folder = tmp_path_factory.mktemp("alike")
    stores = [make_store("markdown", folder), make_store("sqlite", folder)]
    for scope, content in saves:
        outcomes = []
        for one in stores:
            try:
                outcomes.append(one.append(content, scope).content)
            except (EmptyContentError, InvalidContentError) as error:
                outcomes.append(type(error).__name__)
        assert outcomes[0] == outcomes[1]
    markdown, sqlite = stores
    assert markdown.entries() == sqlite.entries()
    assert markdown.load() == sqlite.load()
    if keyword.strip():
        assert markdown.recall(keyword) == sqlite.recall(keyword)
