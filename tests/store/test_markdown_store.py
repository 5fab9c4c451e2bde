"""MarkdownMemoryStore on real files: durability, torn lines, outside edits, real processes."""

from __future__ import annotations

import difflib
import errno
import hashlib
import os
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from support.processes import SAMPLES

from oryxmem import fileio
from oryxmem.errors import MemoryFileConflictedError, MemoryFileUnreadableError, OryxError
from oryxmem.fileio import AppendIntent, ConcurrentChange, FileLock, wait_until_quiet
from oryxmem.store import markdown
from oryxmem.store.base import StoreLimits
from oryxmem.store.format import ARCHIVAL, CORE, NewEntry, parse
from oryxmem.store.markdown import MarkdownMemoryStore

TS = "2026-11-30 10:00:00"


def open_store(tmp_path: Path) -> MarkdownMemoryStore:
    return MarkdownMemoryStore(
        tmp_path / "agent" / "MEMORY.md",
        FileLock(tmp_path / "run" / "agent.lock"),
        clock=lambda: TS,
        limits=StoreLimits(),
    )


def test_first_save_creates_the_file_with_both_headings(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.append("hello")
    assert store.path.read_text() == f"## 核心记忆\n\n## 归档记忆\n- [{TS}] hello\n"


def test_an_archival_save_is_a_one_line_append(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.append("first")
    before = store.path.read_bytes()
    inode = store.path.stat().st_ino
    store.append("second")
    after = store.path.read_bytes()
    assert after == before + f"- [{TS}] second\n".encode()
    assert store.path.stat().st_ino == inode, "an append at the end must not rewrite the file"


def test_the_hash_of_the_file_as_kept_is_the_hash_of_its_bytes_after_each_write(
    tmp_path: Path,
) -> None:
    """Read from disk, rewritten, appended to, written by another program: the kept
    file's hash (every reconcile compares it) is always that of the bytes on disk."""
    store = open_store(tmp_path)

    def on_disk() -> str:
        return hashlib.sha256(store.path.read_bytes()).hexdigest()

    def kept() -> str:
        with store.lock.hold():
            return store.current_locked()[0].lines.sha256()

    store.append("first")  # the file made: written whole
    assert kept() == on_disk()
    store.append("second")  # appended
    assert kept() == on_disk()
    store.append("core fact", CORE)  # rewritten
    assert kept() == on_disk()
    with store.path.open("a", encoding="utf-8") as out:  # another program's line, read back
        out.write("- [2026-12-01 08:00:00]\ttyped\r\n")
    assert kept() == on_disk()
    store.append("third")
    assert kept() == on_disk()


def test_the_entries_a_reader_took_stay_as_they_were_while_the_file_is_written(
    tmp_path: Path,
) -> None:
    """entries() gives the sections as they are, read from the parsed file's lines when
    looked at, after the lock is let go: appends after it do not show in them, and a
    rewrite (a removal, a core save) leaves them as they were."""
    store = open_store(tmp_path)
    for content in ("first", "second ☕", "third"):
        store.append(content)
    core, archival = store.entries()
    expected = [(e.entry_id, e.content) for e in archival]
    positions = store.archival_positions(archival)
    store.append("fourth")
    assert [(e.entry_id, e.content) for e in archival] == expected
    assert len(archival) == 3 and archival[-1].content == "third"
    with store.lock.hold():
        doc, key = store.current_locked()
        store.edit_locked([], [doc.archival[0].entry_id], based_on=key)  # a rewrite
    store.append("a core fact", CORE)
    assert [(e.entry_id, e.content) for e in archival] == expected and list(core) == []
    assert dict(positions) == {entry_id: at for at, (entry_id, _) in enumerate(expected)}
    assert [e.content for e in store.entries()[1]] == ["second ☕", "third", "fourth"]


def test_a_core_save_rewrites_atomically_and_keeps_the_mode(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.append("archival")
    store.path.chmod(0o640)
    store.append("core fact", CORE)
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o640
    assert (
        store.path.read_text()
        == f"## 核心记忆\n- [{TS}] core fact\n\n## 归档记忆\n- [{TS}] archival\n"
    )
    assert list(store.path.parent.glob("*.tmp")) == []


@pytest.mark.parametrize(
    "sample", sorted(p.name for p in SAMPLES.glob("*.md") if p.name != "README.md")
)
def test_saving_into_a_sample_touches_no_other_byte(tmp_path: Path, sample: str) -> None:
    store = open_store(tmp_path)
    store.path.parent.mkdir(parents=True)
    original = (SAMPLES / sample).read_bytes()
    store.path.write_bytes(original)
    if sample == "conflicted.md":
        with pytest.raises(MemoryFileConflictedError):
            store.append("x")
        assert store.path.read_bytes() == original
        return
    store.append("added\nline")
    new_lines = store.path.read_bytes().splitlines(keepends=True)
    nl = b"\r\n" if b"\r\n" in original else b"\n"
    old_lines = original.splitlines(keepends=True)
    if old_lines and not old_lines[-1].endswith(b"\n"):
        old_lines[-1] += nl  # the one byte change allowed: the missing final line break
    matcher = difflib.SequenceMatcher(a=old_lines, b=new_lines, autojunk=False)
    changes = [op for op in matcher.get_opcodes() if op[0] != "equal"]
    assert [op[0] for op in changes] == ["insert"] * len(changes)
    inserted = [line for op in changes for line in new_lines[op[3] : op[4]]]
    added = f"- [{TS}] added\\nline".encode() + nl
    assert inserted.count(added) == 1
    assert set(inserted) - {added} <= {"## 归档记忆".encode() + nl, nl}


def test_outside_edit_is_seen_even_at_the_same_size(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.append("aaaa")
    assert [e.content for e in store.entries()[1]] == ["aaaa"]
    text = store.path.read_text().replace("aaaa", "bbbb")
    store.path.write_text(text)  # in place, same size: what VS Code does
    assert [e.content for e in store.entries()[1]] == ["bbbb"]
    store.append("after")
    assert [e.content for e in store.entries()[1]] == ["bbbb", "after"]


def test_editor_rename_save_is_seen(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.append("one")
    store.entries()
    tmp = store.path.with_name("MEMORY.md.swp")
    tmp.write_text(store.path.read_text() + "- [2026-01-01 00:00:00] from vim\n")
    os.replace(tmp, store.path)
    store.append("two")
    assert [e.content for e in store.entries()[1]] == ["one", "from vim", "two"]


def test_a_file_an_editor_replaced_is_free_at_once_and_one_written_in_place_once_quiet(
    tmp_path: Path,
) -> None:
    """Someone else's fresh write holds a save back only while it may be mid-way: a file
    written in place (the inode oryxmem left, truncated) until it has been quiet; one
    replaced by rename (written whole, then named) not at all, unless its writer still
    holds it open to write in place."""
    store = open_store(tmp_path)
    store.append("one")
    assert not store.others_are_writing()
    tmp = store.path.with_name("MEMORY.md.swp")
    tmp.write_text(store.path.read_text() + f"- [{TS}] from vim\n")
    os.replace(tmp, store.path)  # vim's save: a new inode, fresh
    assert not store.others_are_writing()
    store.append("two")  # onto vim's inode: the one oryxmem left last now
    store.path.write_text(store.path.read_text() + f"- [{TS}] from code\n")  # in place
    assert store.others_are_writing()
    quiet = time.time() - 1
    os.utime(store.path, (quiet, quiet))
    assert not store.others_are_writing()
    tmp.write_text(store.path.read_text())
    os.replace(tmp, store.path)
    holder = subprocess.Popen(  # replaced, but its writer still has it open to write
        [
            sys.executable,
            "-c",
            "import sys; f = open(sys.argv[1], 'r+'); sys.stdin.read()",
            str(store.path),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while not store.others_are_writing():
            assert time.monotonic() < deadline and holder.poll() is None
            time.sleep(0.05)
    finally:
        holder.communicate(b"")
    assert not store.others_are_writing()
    store.append("three")
    assert [e.content for e in store.entries()[1]] == [
        "one",
        "from vim",
        "two",
        "from code",
        "three",
    ]


def test_a_save_onto_a_file_an_editor_left_looks_through_proc_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Is the file free, and is it still, just before the write: one look through /proc
    for the file as the editor left it (a stat of every file every process holds open,
    milliseconds on a workstation), not one per question. A file that changed since is
    looked at again."""
    store = open_store(tmp_path)
    store.append("one")
    looks: list[tuple[int, int]] = []
    look = fileio._held_open_in_proc

    def counted(target: tuple[int, int]) -> bool:
        looks.append(target)
        return look(target)

    monkeypatch.setattr(fileio, "_held_open_in_proc", counted)
    # However slow the machine, the questions of one save come within the time a "no" is
    # kept for (the time itself is not what this test is about).
    monkeypatch.setattr(fileio, "NO_WRITER_ANSWER_SECONDS", 60.0)
    for n in range(3):
        tmp = store.path.with_name("MEMORY.md.swp")
        tmp.write_text(store.path.read_text() + f"- [{TS}] from vim {n}\n")
        os.replace(tmp, store.path)  # an editor's save, a while ago
        quiet = time.time() - 1
        os.utime(store.path, (quiet, quiet))
        looks.clear()
        assert not store.others_are_writing()
        store.append(f"saved after vim {n}")
        assert looks == [(store.path.stat().st_dev, store.path.stat().st_ino)]
    assert [e.content for e in store.entries()[1]][-2:] == ["from vim 2", "saved after vim 2"]


def test_waiting_for_a_writer_in_place_ends_when_it_replaces_the_file(tmp_path: Path) -> None:
    """A wait for the inode someone writes in place to be quiet ends as soon as the path
    names another file: the wait is for that inode, and the new one is read afresh."""
    path = tmp_path / "MEMORY.md"
    path.write_text("first\n")
    waited_on = path.stat().st_ino
    replaced = threading.Event()
    done = threading.Event()

    def writer() -> None:
        """Writes in place every 20 ms (never quiet), replaces the file once, and goes on
        writing into the new one, until the wait is over or 30 s pass."""
        end = time.monotonic() + 30
        n = 0
        while not done.is_set() and time.monotonic() < end:
            n += 1
            if n == 10:
                tmp = path.with_name("MEMORY.md.new")
                tmp.write_text("second\n")
                os.replace(tmp, path)
                replaced.set()
            with open(path, "a") as handle:
                handle.write(f"{n}\n")
            time.sleep(0.02)
        ended.append("by the wait" if done.is_set() else "by its own end")

    ended: list[str] = []
    thread = threading.Thread(target=writer)
    thread.start()
    try:
        got = wait_until_quiet(path, waited_on, quiet=60, patience=60)
    finally:
        done.set()
        thread.join()
    assert replaced.is_set() and got is not None and got.inode != waited_on
    assert ended == ["by the wait"]


def test_a_fresh_file_oryxmem_never_wrote_is_taken_as_written_in_place(tmp_path: Path) -> None:
    """With no write of oryxmem's to tell a new inode by, a fresh file is one an editor may
    still be writing: a save waits for it to be quiet."""
    path = tmp_path / "agent" / "MEMORY.md"
    path.parent.mkdir(parents=True)
    path.write_text(f"## 核心记忆\n\n## 归档记忆\n- [{TS}] typed\n")
    store = open_store(tmp_path)
    assert store.others_are_writing()
    quiet = time.time() - 1
    os.utime(path, (quiet, quiet))
    assert not store.others_are_writing()


def test_conflicted_file_is_neither_read_nor_written(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.path.parent.mkdir(parents=True)
    original = (SAMPLES / "conflicted.md").read_bytes()
    store.path.write_bytes(original)
    for call in (store.load, store.entries, lambda: store.recall("x"), lambda: store.append("x")):
        with pytest.raises(MemoryFileConflictedError) as caught:
            call()
        assert caught.value.data["conflict_lines"] == [5, 9]
    assert store.path.read_bytes() == original


def test_non_utf8_file_is_reported_and_left_alone(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.path.parent.mkdir(parents=True)
    store.path.write_bytes(b"## \xe5\xbd\x92\xe6\xa1\xa3\n- [2026-01-01 00:00:00] \xff\xfe\n")
    with pytest.raises(MemoryFileUnreadableError):
        store.append("x")
    assert store.path.read_bytes().endswith(b"\xff\xfe\n")


def crash_mid_append(store: MarkdownMemoryStore, line: bytes, written: int) -> None:
    """What a crash mid-append leaves: the journal's record of its intent (not marked
    done), and `written` bytes of the line."""
    size = store.path.stat().st_size
    with store.lock.hold():
        store.answered.note([], AppendIntent(store.path.stat().st_ino, size, line))
    with open(store.path, "ab") as handle:
        handle.write(line[:written])


def test_a_torn_append_is_completed_from_the_journal_not_read_as_an_entry(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.append("before the crash")
    line = f"- [{TS}] the line being written when the power failed\n".encode()
    crash_mid_append(store, line, 17)
    fresh = open_store(tmp_path)
    contents = [e.content for e in fresh.entries()[1]]
    assert contents == ["before the crash", "the line being written when the power failed"]
    assert any("repaired a torn line" in note for note in fresh.repairs)
    assert fresh.path.read_bytes().endswith(line)
    assert parse(fresh.path.read_text()).unparsed == []


def test_a_finished_append_with_a_stale_journal_is_left_as_is(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.append("one")
    line = f"- [{TS}] two\n".encode()
    crash_mid_append(store, line, len(line))  # written whole; the journal was not cleared
    fresh = open_store(tmp_path)
    assert [e.content for e in fresh.entries()[1]] == ["one", "two"]
    assert fresh.repairs == ["complete"]


def test_a_journal_for_a_replaced_file_is_ignored(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.append("one")
    with store.lock.hold():
        store.answered.note([], AppendIntent(1, 3, b"- [x] y\n"))
    fresh = open_store(tmp_path)
    assert [e.content for e in fresh.entries()[1]] == ["one"]
    assert fresh.repairs == ["file replaced since"]


def test_stale_temp_files_are_cleaned(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.append("x")
    leftover = store.path.with_name(".MEMORY.md.deadbeef.tmp")
    leftover.write_text("half")
    assert store.clean_temp_files() == [leftover]
    assert not leftover.exists()


def test_a_tombstones_temp_file_a_killed_writer_left_is_cleaned_too(tmp_path: Path) -> None:
    """The soak's daemon, killed while it wrote TOMBSTONES (a forget), left its temp file
    beside MEMORY.md; the next start removed only MEMORY.md's."""
    store = open_store(tmp_path)
    store.append("x")
    leftover = store.path.with_name(".TOMBSTONES.168c9f91.tmp")
    leftover.write_text("2026-12-06 09:00:00 a1b2c3 half a line")
    other = store.path.with_name(".notes.md.168c9f91.tmp")  # not oryxmem's: left alone
    other.write_text("someone else's")
    assert store.clean_temp_files() == [leftover]
    assert not leftover.exists() and other.exists()


WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from oryxmem.fileio import FileLock
    from oryxmem.store.base import StoreLimits
    from oryxmem.store.format import CORE
    from oryxmem.store.markdown import MarkdownMemoryStore

    folder, worker, count = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    store = MarkdownMemoryStore(
        folder / "agent" / "MEMORY.md",
        FileLock(folder / "run" / "agent.lock"),
        clock=lambda: "2026-11-30 10:00:00",
        limits=StoreLimits(),
    )
    for i in range(count):
        # Every tenth save goes to core: a full rewrite racing the appends.
        store.append(f"worker {worker} entry {i}", CORE if i % 10 == 0 else "archival")
    """
)


def test_eight_processes_appending_lose_nothing_and_duplicate_nothing(tmp_path: Path) -> None:
    workers, count = 8, 200
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), str(w), str(count)])
        for w in range(workers)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0] * workers
    doc = parse((tmp_path / "agent" / "MEMORY.md").read_text())
    assert doc.parseable and doc.unparsed == []
    contents = [e.content for e in doc.all_entries()]
    expected = {f"worker {w} entry {i}" for w in range(workers) for i in range(count)}
    assert len(contents) == workers * count
    assert set(contents) == expected
    for w in range(workers):
        mine = [int(c.split()[-1]) for c in contents if c.startswith(f"worker {w} ")]
        core = [i for i in mine if i % 10 == 0]
        archival = [i for i in mine if i % 10 != 0]
        assert sorted(core) == core and sorted(archival) == archival, "order per writer kept"
    assert ARCHIVAL in doc.sections and list((tmp_path / "agent").glob("*.tmp")) == []


def test_an_append_never_goes_to_a_file_replaced_since_it_was_read(tmp_path: Path) -> None:
    """Found by the soak: edits planned against the file as read must not be applied to
    a file git or an editor has renamed over it since (nor, through the append handle
    still open on the old one, to its orphaned inode): refused, read again."""
    store = open_store(tmp_path)
    store.append("first")  # the handle is now open on this inode
    with store.lock.hold():
        _, read = store.current_locked()  # the plan is made against this file
        replacement = store.path.with_name(".MEMORY.md.swp")
        replacement.write_text(f"## 归档记忆\n- [{TS}] from the other branch\n")
        os.replace(replacement, store.path)
        before = store.path.read_bytes()
        with pytest.raises(ConcurrentChange):
            store.edit_locked([NewEntry("archival", TS, "second")], (), based_on=read)
        assert store.path.read_bytes() == before
    assert [e.content for e in store.entries()[1]] == ["from the other branch"]


def test_a_save_outlasts_an_editor_that_replaces_the_file_under_every_try(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the soak: an editor saving again and again from an old buffer, on a busy
    machine, renamed its copy over MEMORY.md between the save's read and its write on
    more tries than SAVE_ATTEMPTS. The save keeps trying (SAVE_PATIENCE_SECONDS) and
    lands in the file as it is once the editor lets a try through."""
    store = open_store(tmp_path)
    store.append("first")
    replaced = replaced_after_each_read(store, monkeypatch, markdown.SAVE_ATTEMPTS + 10)
    appended = store.append_many([NewEntry("archival", TS, "second")])
    assert len(replaced) == markdown.SAVE_ATTEMPTS + 10  # every one of those tries moved
    assert [e.content for e in appended.entries] == ["second"]
    assert store.path.stat().st_ino == replaced[-1], "written to the file as the editor left it"
    assert [e.content for e in parse(store.path.read_text()).archival] == ["first", "second"]


def test_a_save_gives_up_on_a_file_replaced_under_every_try_for_its_patience(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bounded: a writer that never lets a try through gets the save refused (the caller
    hears it), after SAVE_ATTEMPTS tries and SAVE_PATIENCE_SECONDS, with nothing written."""
    store = open_store(tmp_path)
    store.append("first")
    monkeypatch.setattr(markdown, "SAVE_PATIENCE_SECONDS", 0.2)
    replaced = replaced_after_each_read(store, monkeypatch, None)
    began = time.monotonic()
    with pytest.raises(ConcurrentChange):
        store.append_many([NewEntry("archival", TS, "second")])
    assert len(replaced) >= markdown.SAVE_ATTEMPTS and time.monotonic() - began >= 0.2
    assert [e.content for e in parse(store.path.read_text()).archival] == ["first"]


def replaced_after_each_read(
    store: MarkdownMemoryStore, monkeypatch: pytest.MonkeyPatch, times: int | None
) -> list[int]:
    """An editor renames its copy over MEMORY.md right after each of the store's reads
    (``times`` times, or always): the inodes it left, in order."""
    replaced: list[int] = []
    parse_locked = store._parseable_locked

    def read_then_replaced() -> object:
        cached = parse_locked()
        if times is None or len(replaced) < times:
            copy = store.path.with_name(".MEMORY.md.swp")
            copy.write_bytes(store.path.read_bytes())
            os.replace(copy, store.path)
            replaced.append(store.path.stat().st_ino)
        return cached

    monkeypatch.setattr(store, "_parseable_locked", read_then_replaced)
    return replaced


def orphaned_edit(store: MarkdownMemoryStore, typed: str) -> None:
    """An editor truncates MEMORY.md and writes it again with one more line (``typed``),
    and while it is at it a core save rewrites the file: the rest of its writing, the
    typed line with it, goes into the replaced inode."""
    full = store.path.read_text() + f"- [2026-07-22 09:30:00] {typed}\n"
    cut = full.index(f"- [2026-07-22 09:30:00] {typed}")
    with open(store.path, "r+b") as editor:
        editor.truncate(0)
        editor.write(full[:cut].encode())
        editor.flush()
        store.append("saved meanwhile", CORE)  # waits for quiet, then rewrites
        editor.write(full[cut:].encode())  # into the replaced inode


def merged(store: MarkdownMemoryStore) -> None:
    """Until the store has merged what its orphaned inodes received (5 s at most)."""
    deadline = time.monotonic() + 5
    while not store.merge_orphans():
        assert time.monotonic() < deadline, "the orphan was never merged"
        time.sleep(0.05)


def test_what_an_editor_writes_into_the_inode_a_rewrite_replaced_is_merged_back(
    tmp_path: Path,
) -> None:
    """An editor holding MEMORY.md open, writing it again in place, for longer than a save
    waits: the save's rewrite (a core entry) replaces the file, the editor's later writes
    go to the orphaned inode, and are merged back once it is quiet."""
    store = open_store(tmp_path)
    store.append("old line")
    path = store.path
    orphaned_edit(store, "typed after the save")
    assert "typed after the save" not in path.read_text()
    merged(store)
    text = path.read_text()
    assert "] typed after the save\n" in text and "] saved meanwhile\n" in text, text
    assert "] old line\n" in text
    assert any("merged back" in notice for notice in store.take_repairs())


def test_an_orphan_merge_into_a_file_someone_wrote_since_adds_only_what_it_lacks(
    tmp_path: Path,
) -> None:
    """The replaced inode got the editor's new line, and then someone (git, another
    editor) wrote the file itself: only the typed entries the file lacks are added."""
    store = open_store(tmp_path)
    store.append("old line")
    path = store.path
    orphaned_edit(store, "typed into the orphan")
    replaced = path.read_text() + "- [2026-07-22 09:31:00] written by git since\n"
    os.utime(path)  # someone else's write, by rename as git writes
    tmp = path.with_name("MEMORY.md.git")
    tmp.write_text(replaced)
    tmp.replace(path)
    time.sleep(0.4)
    merged(store)
    text = path.read_text()
    assert text.count("] typed into the orphan\n") == 1
    assert "] written by git since\n" in text and "] saved meanwhile\n" in text


def test_the_answered_log_keeps_other_processes_records_and_leaves_no_temp_file(
    tmp_path: Path,
) -> None:
    from oryxmem.store.answered import AnsweredLog

    locks = tmp_path / "locks"
    locks.mkdir()
    log = AnsweredLog(locks / "agent-a.lock.answered")
    # Another process's save, not in the rows yet, as an older oryxmem wrote it (appended,
    # no zeros ahead), and a record a crash cut short after it.
    log.path.write_text(
        '{"pid": 1, "scope": "archival", "ts": null, "content": "theirs", "id": "x"}\n'
        '{"pid": 1, "scope": "archi'
    )
    mine = parse(f"## 归档记忆\n- [{TS}] mine\n").archival
    log.note(mine)  # over the one cut short
    assert [e.content for e in log.entries()] == ["theirs", "mine"]
    log.forget(os.getpid())
    assert [e.content for e in log.entries()] == ["theirs"]
    log.forget()
    assert log.entries() == [] and log.path.read_bytes().strip(b"\0") == b""
    assert sorted(p.name for p in locks.iterdir()) == ["agent-a.lock.answered"]


def test_records_are_written_over_zeros_written_ahead_so_a_sync_moves_no_metadata(
    tmp_path: Path,
) -> None:
    """The log's size moves once per GROW_BYTES, not with each record; a record another
    process wrote meanwhile is found, and the next record goes after it."""
    from oryxmem.store.answered import GROW_BYTES, AnsweredLog

    path = tmp_path / "agent-a.lock.answered"
    log, other = AnsweredLog(path), AnsweredLog(path)
    entries = parse(f"## 归档记忆\n- [{TS}] one\n").archival
    first = log.note(entries)
    size = path.stat().st_size
    assert first == 0 and size > GROW_BYTES
    second = other.note(entries)  # another process, under the same lock
    third = log.note(entries)
    assert 0 < second < third and path.stat().st_size == size
    log.take_back(third, sync=True)
    assert len(log.records()) == 2 and log.note(entries) == third
    log.mark_done(second)
    assert [r["done"] for r in log.records()] == [0, 1, 0]


def test_a_line_appended_without_the_lock_during_a_save_is_never_dropped_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mem0 soak found it: `echo ... >> MEMORY.md` landed between a save's look at the
    file and its append; both were in the file, but the store took the file for its copy
    plus its own line, and the next rewrite (a removal) wrote the human's line away."""
    store = open_store(tmp_path)
    store.append("first")
    opened = store.journal.appender.open_for

    def then_a_human_appends(inode: int):  # type: ignore[no-untyped-def]
        got = opened(inode)
        with open(store.path, "a", encoding="utf-8") as human:
            human.write(f"- [{TS}] typed without the lock\n")
        return got

    monkeypatch.setattr(store.journal.appender, "open_for", then_a_human_appends)
    store.append("saved meanwhile")
    monkeypatch.undo()
    assert [e.content for e in store.document().archival] == [
        "first",
        "typed without the lock",
        "saved meanwhile",
    ]
    with store.lock.hold():
        doc, key = store.current_locked()
        first = doc.archival[0].entry_id
        store.edit_locked([], [first], based_on=key)  # a removal: a rewrite
    assert "] typed without the lock\n" in store.path.read_text()


def journal_records(store: MarkdownMemoryStore) -> list[dict[str, object]]:
    return store.answered.records()


def test_a_save_is_journaled_in_one_record_that_is_also_its_answered_note(
    tmp_path: Path,
) -> None:
    """Before the append, one synced record says where it goes and what it writes, with
    the saves' entries; once durable it is marked done, and it leaves when the rows
    have the saves. The lock file holds nothing but the lock."""
    store = open_store(tmp_path)
    store.append("one")  # a new file: a rewrite, noted after it with no intent
    first = store.append_many([NewEntry(ARCHIVAL, TS, "two"), NewEntry(ARCHIVAL, TS, "three")])
    records = journal_records(store)
    assert [r["done"] for r in records] == [0, 1]
    assert "intent" not in records[0]
    intent = AppendIntent.from_fields(records[1]["intent"])
    assert intent is not None and intent.offset + len(intent.data) == store.path.stat().st_size
    assert intent.data.decode().endswith("] three\n")
    assert [e.content for e in store.answered.entries()] == ["one", "two", "three"]
    assert [e.entry_id for e in first.entries] == [e.entry_id for e in store.answered.entries()[1:]]
    assert store.lock.lock_path.read_bytes() == b""
    store.rows_have_answered()
    assert journal_records(store) == []
    fresh = open_store(tmp_path)  # a later process finds nothing to repair or tell
    assert [e.content for e in fresh.entries()[1]] == ["one", "two", "three"]
    assert fresh.repairs == []


def test_a_save_left_unsettled_is_durable_by_its_record_and_synced_with_the_rows(
    tmp_path: Path,
) -> None:
    """The write path's saves: one sync (the record) before the answer. The bytes are in
    MEMORY.md at once; its sync, and the record's mark, come when the rows have them."""
    store = open_store(tmp_path)
    store.append("one")
    store.rows_have_answered()
    store.append_many([NewEntry(ARCHIVAL, TS, "two")], settle=False)
    store.append_many([NewEntry(ARCHIVAL, TS, "three")], settle=False)
    assert [e.content for e in parse(store.path.read_text()).archival] == ["one", "two", "three"]
    assert [r["done"] for r in journal_records(store)] == [0, 0]
    store.settle()
    assert [r["done"] for r in journal_records(store)] == [1, 1]
    store.append_many([NewEntry(ARCHIVAL, TS, "four")], settle=False)
    store.rows_have_answered()
    assert journal_records(store) == []
    store.append_many([NewEntry(ARCHIVAL, TS, "five")], settle=False)
    store.close()  # a process that stops syncs what it appended first
    assert [r["done"] for r in journal_records(store)] == [1]


def test_appends_the_disk_lost_are_written_again_from_their_records_in_order(
    tmp_path: Path,
) -> None:
    """A power cut after two saves were answered: their records were synced, their bytes
    in MEMORY.md were not, and the disk kept only part of the first. The next process
    to take the lock writes both from the records, in order, and says so."""
    store = open_store(tmp_path)
    store.append("before")
    store.rows_have_answered()
    size = store.path.stat().st_size
    store.append_many([NewEntry(ARCHIVAL, TS, "first answered")], settle=False)
    store.append_many([NewEntry(ARCHIVAL, TS, "second answered")], settle=False)
    with open(store.path, "r+b") as handle:  # what the disk kept: 9 bytes of the first
        handle.truncate(size + 9)
    fresh = open_store(tmp_path)
    assert [e.content for e in fresh.entries()[1]] == [
        "before",
        "first answered",
        "second answered",
    ]
    assert fresh.repairs[0].startswith("repaired a torn line (9 of")
    assert fresh.repairs[1].startswith("wrote an append the disk had not kept")
    assert parse(fresh.path.read_text()).unparsed == []
    again = open_store(tmp_path)  # done once: a later process finds them complete
    assert [e.content for e in again.entries()[1]] == [
        "before",
        "first answered",
        "second answered",
    ]
    assert again.repairs == ["complete", "complete"]


KILLED_WRITER = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from oryxmem.fileio import FileLock
    from oryxmem.store.base import StoreLimits
    from oryxmem.store.format import ARCHIVAL, NewEntry
    from oryxmem.store.markdown import MarkdownMemoryStore

    folder = Path(sys.argv[1])
    store = MarkdownMemoryStore(
        folder / "agent" / "MEMORY.md",
        FileLock(folder / "run" / "agent.lock"),
        clock=lambda: "2026-11-30 10:00:00",
        limits=StoreLimits(),
    )
    store.append_many([NewEntry(ARCHIVAL, "2026-11-30 10:00:00", "theirs")], settle=False)
    os._exit(0)  # killed before its saves were synced or in the rows
    """
)


def test_a_process_settles_its_own_records_and_a_dead_ones_are_found_complete(
    tmp_path: Path,
) -> None:
    """Two processes append unsynced saves to one file in turn. One settles: only its own
    records are marked done. The other died with its record open: the next process to
    take the lock finds that append complete and says nothing."""
    store = open_store(tmp_path)
    store.append("before")
    store.rows_have_answered()
    store.append_many([NewEntry(ARCHIVAL, TS, "mine")], settle=False)
    subprocess.run([sys.executable, "-c", KILLED_WRITER, str(tmp_path)], check=True)
    store.append_many([NewEntry(ARCHIVAL, TS, "mine again")], settle=False)
    store.settle()
    records = [(r["done"], r["entries"][0]["content"]) for r in journal_records(store)]
    assert records == [(1, "mine"), (0, "theirs"), (1, "mine again")]
    fresh = open_store(tmp_path)
    contents = [e.content for e in fresh.entries()[1]]
    assert contents == ["before", "mine", "theirs", "mine again"]
    assert fresh.repairs == ["complete"] and fresh.take_repairs() == []


def test_an_append_that_answers_no_save_leaves_no_record(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.append("one")
    store.rows_have_answered()
    with store.lock.hold():
        _, key = store.current_locked()
        store.edit_locked(
            [NewEntry(ARCHIVAL, TS, "from the rows")], (), based_on=key
        )  # a reconcile's
    assert journal_records(store) == []
    assert "from the rows" in store.path.read_text()


def test_an_append_that_fails_takes_its_record_back_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(tmp_path)
    store.append("one")
    store.rows_have_answered()
    before = store.path.read_bytes()
    real_fsync = os.fsync
    failed: list[int] = []

    def failing_fsync(fd: int) -> None:  # the append's fsync fails; the take-back's works
        if not failed and os.fstat(fd).st_ino == store.path.stat().st_ino:
            failed.append(fd)
            raise OSError(errno.EIO, "the disk failed")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OryxError):
        store.append("refused")
    monkeypatch.undo()
    assert store.path.read_bytes() == before
    assert journal_records(store) == [] and store.answered.entries() == []
