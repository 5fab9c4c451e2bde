"""Index upkeep in the daemon (issue 21): a backlog of rows is the indexer's, the words
take it in before the vectors, and no save or search takes a backlog in itself."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import oryxmem.daemon.indexer as indexer_module
import oryxmem.service.upkeep as upkeep_module
from oryxmem.config import Config
from oryxmem.daemon.indexer import Indexer
from oryxmem.daemon.worker import MemoryWorker
from oryxmem.index import catch_up, pending, take_step, upcoming
from oryxmem.service import MemoryService, SaveRequest
from oryxmem.service.upkeep import BACKLOG_ROWS, WORDS_STEP_ROWS
from oryxmem.store.db import write_transaction
from oryxmem.store.format import ARCHIVAL, NewEntry, numbered
from oryxmem.store.rows import insert_rows
from oryxmem.workspace import Workspace

TS = "2026-11-30 10:00:00"
BACKLOG = WORDS_STEP_ROWS * 2 + 500  # three steps of the words


@pytest.fixture
def in_daemon(workspace: Workspace) -> Iterator[MemoryService]:
    service = MemoryService(workspace, Config.load(workspace.config_path), in_daemon=True)
    yield service
    service.close()


def arrive(service: MemoryService, agent: str, texts: list[str]) -> None:
    """Rows arriving at once, as a reconcile of a pulled file puts them in."""
    entries = numbered(NewEntry(ARCHIVAL, TS, text) for text in texts)
    with write_transaction(service.db):
        insert_rows(service.db, agent, entries, "file")


def backlog_of(service: MemoryService) -> dict[str, int]:
    db = service.index_db
    return {name: pending(db, index) or 0 for name, index in service.upkeep.indexes.items()}


def test_a_backlog_is_taken_into_the_words_first_and_no_search_waits_for_it(
    in_daemon: MemoryService,
) -> None:
    service = in_daemon
    arrive(service, "pulled", [f"pulled note {n} about kettles" for n in range(BACKLOG)])
    assert BACKLOG > BACKLOG_ROWS
    # The memory thread leaves it (before a search, and when idle).
    assert service.upkeep.follow_saves() == 0
    assert backlog_of(service) == {"keyword": BACKLOG, "bm25": BACKLOG, "vectors": BACKLOG}
    # A search meanwhile answers without it and says so; it embeds none of it itself.
    found = service.search("pulled", "kettles", limit=5)
    assert (found.words_pending, found.unembedded) == (BACKLOG, BACKLOG)
    indexer = Indexer(service)
    seen = []
    while backlog_of(service)["vectors"] == BACKLOG:
        assert indexer.step()
        seen.append(backlog_of(service))
    # Steps of the words (each of both words indexes) to the end of the backlog, and
    # only then the vectors.
    words = [(step["keyword"], step["bm25"]) for step in seen]
    left = [BACKLOG - WORDS_STEP_ROWS, BACKLOG - 2 * WORDS_STEP_ROWS, 0]
    assert words == [(n, n) for n in left] + [(0, 0)]
    assert all(step["vectors"] == BACKLOG for step in seen[:-1])
    assert seen[-1]["vectors"] < BACKLOG
    rates = indexer.upkeep.rates()
    assert rates["bm25"] > 0 and rates["keyword"] > 0 and rates["vectors"] > 0
    found = service.search("pulled", "kettles", limit=5)
    assert found.words_pending == 0 and len(found.hits) == 5
    assert 0 < found.unembedded < BACKLOG


def test_the_saves_rows_are_taken_into_the_words_before_a_search(
    in_daemon: MemoryService,
) -> None:
    service = in_daemon
    arrive(service, "coder", ["the kettle is in the second drawer"])
    assert service.upkeep.follow_saves() == 2  # the row, into each of the two words indexes
    found = service.search("coder", "kettle", limit=5)
    assert found.words_pending == 0
    assert [hit.entry.content for hit in found.hits] == ["the kettle is in the second drawer"]


def test_a_vectors_step_takes_in_what_it_embedded_before_the_lock_and_no_more(
    in_daemon: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows that arrive while a step embeds (saves mirrored meanwhile) are the next
    step's: none is embedded under the write lock."""
    service = in_daemon
    arrive(service, "a", ["the first note about tea", "the second note about tea"])
    vectors = service.upkeep.indexes["vectors"]
    embedded: list[list[str]] = []
    real_prepare = vectors.prepare

    def prepare_then_more_arrive(rows):  # type: ignore[no-untyped-def]
        real_prepare(rows)
        if service.index_db.conn.in_transaction:
            return  # add() making sure of its rows: they were prepared
        embedded.append([r.content for r in rows])
        if len(embedded) == 1:
            arrive(service, "a", ["a note saved while the step embedded"])

    monkeypatch.setattr(vectors, "prepare", prepare_then_more_arrive)
    real_embed = vectors.embedder.embed
    under_lock: list[list[str]] = []

    def embed(texts, kind):  # type: ignore[no-untyped-def]
        if service.index_db.conn.in_transaction:
            under_lock.append(list(texts))
        return real_embed(texts, kind)

    monkeypatch.setattr(vectors.embedder, "embed", embed)
    assert service.upkeep.embed_step() == 2
    assert backlog_of(service)["vectors"] == 1
    assert service.upkeep.embed_step() == 1
    assert embedded[1] == ["a note saved while the step embedded"]
    assert under_lock == [] and backlog_of(service)["vectors"] == 0


def test_a_trickle_of_rows_waits_for_more_and_is_embedded_in_one_step(
    in_daemon: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each write holds the database's write lock: the rows of a few saves wait (up to
    GATHER_SECONDS) for more, then go in with one step."""
    now = [1000.0]
    monkeypatch.setattr(indexer_module.time, "monotonic", lambda: now[0])
    service = in_daemon
    indexer = Indexer(service)
    steps: list[int] = []
    real_step = service.upkeep.embed_step
    monkeypatch.setattr(service.upkeep, "embed_step", lambda: steps.append(1) or real_step())
    arrive(service, "a", ["a note about tea"])
    assert not indexer.step()
    assert indexer.look_again_in == pytest.approx(indexer_module.GATHER_SECONDS)
    now[0] += indexer_module.GATHER_SECONDS / 2
    arrive(service, "a", ["a note about coffee", "a note about water"])
    assert not indexer.step()
    assert indexer.look_again_in == pytest.approx(indexer_module.GATHER_SECONDS / 2)
    assert steps == [] and backlog_of(service)["vectors"] == 3
    now[0] += indexer_module.GATHER_SECONDS / 2
    assert indexer.step()
    assert steps == [1] and backlog_of(service)["vectors"] == 0
    # A whole batch does not wait.
    batch = service.upkeep.indexes["vectors"].batch
    arrive(service, "a", [f"note {n} about juice" for n in range(batch)])
    assert indexer.step()
    assert steps == [1, 1] and backlog_of(service)["vectors"] == 0


def test_the_vectors_wait_while_saves_stream_in_and_not_for_ever(
    in_daemon: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Embedding beside a stream of saves slows every save: the rows the vectors lack
    (a batch or more) wait until no save has come for STREAM_GAP_SECONDS, and at most
    YIELD_SECONDS; a stream that outlasts that has its rows embedded as they come."""
    now = [1000.0]
    last_save: list[float | None] = [None]
    monkeypatch.setattr(indexer_module.time, "monotonic", lambda: now[0])
    service = in_daemon
    indexer = Indexer(service, last_save=lambda: last_save[0])
    steps: list[int] = []
    real_step = service.upkeep.embed_step
    monkeypatch.setattr(service.upkeep, "embed_step", lambda: steps.append(1) or real_step())
    batch = service.upkeep.indexes["vectors"].batch
    gap = indexer_module.STREAM_GAP_SECONDS

    # A stream that ends: the batch waits for its end, then goes in at once.
    arrive(service, "a", [f"note {n} about tea" for n in range(batch)])
    last_save[0] = now[0]
    assert not indexer.step()
    assert steps == [] and indexer.look_again_in == pytest.approx(gap)
    now[0] += gap / 2
    last_save[0] = now[0]  # another save
    assert not indexer.step()
    assert steps == [] and indexer.look_again_in == pytest.approx(gap)
    now[0] += gap
    assert indexer.step()
    assert steps == [1] and backlog_of(service)["vectors"] == 0

    # A stream that goes on: put off for YIELD_SECONDS, then every step embeds.
    arrive(service, "a", [f"note {n} about coffee" for n in range(2 * batch)])
    began = now[0]
    while now[0] - began < indexer_module.YIELD_SECONDS:
        last_save[0] = now[0]
        assert not indexer.step()
        assert steps == [1]
        now[0] += gap / 2
    last_save[0] = now[0]
    assert indexer.step()
    last_save[0] = now[0] = now[0] + gap / 2
    assert indexer.step()
    assert steps == [1, 1, 1] and backlog_of(service)["vectors"] == 0


def test_the_memory_thread_tells_the_indexer_when_it_last_wrote_saves(
    workspace: Workspace, in_daemon: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The indexer's other half, as the daemon wires it: the memory thread notes when it
    wrote saves (not when it answered another call), and a batch the vectors lack waits
    while that is under STREAM_GAP_SECONDS old (the indexer's clock held at the save)."""
    memory = MemoryService(workspace, Config.load(workspace.config_path), in_daemon=True)
    worker = MemoryWorker(memory, on_lagging=lambda agent: None)
    worker.start()
    try:
        worker.call(lambda s: None).result(timeout=10)
        assert worker.last_save_at is None
        before = time.monotonic()
        worker.save(memory.resolve("a"), SaveRequest("a note about tea")).result(timeout=10)
        saved_at = worker.last_save_at
        assert saved_at is not None and before <= saved_at <= time.monotonic()
        indexer = Indexer(in_daemon, last_save=lambda: worker.last_save_at)
        batch = in_daemon.upkeep.indexes["vectors"].batch
        arrive(in_daemon, "b", [f"note {n} about coffee" for n in range(batch)])
        monkeypatch.setattr(indexer_module.time, "monotonic", lambda: saved_at)
        assert not indexer.step()
        assert indexer.look_again_in == pytest.approx(indexer_module.STREAM_GAP_SECONDS)
        assert backlog_of(in_daemon)["vectors"] >= batch
    finally:
        worker.stop()


def test_the_index_file_commits_unsynced_and_the_rows_stay_synced(
    workspace: Workspace, in_daemon: MemoryService
) -> None:
    """What the indexes write is derived (made again if a power loss takes it): the index
    file's commits skip the fsync; the rows' file keeps synchronous=FULL, the indexer's
    connection to it too."""
    indexer = Indexer(in_daemon)
    indexer.on_start()
    assert in_daemon.index_db.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    assert in_daemon.db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


def test_the_words_take_a_mirrors_rows_in_stemmed_with_no_lock_held(
    in_daemon: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    import oryxmem.index.bm25 as bm25_module

    service = in_daemon
    stemmed: list[tuple[str, bool]] = []
    real = bm25_module.index_text

    def index_text(text: str) -> str:
        stemmed.append((text, service.index_db.conn.in_transaction))
        return real(text)

    monkeypatch.setattr(bm25_module, "index_text", index_text)
    service.save("a", "the kettle whistles in the morning")
    mine = [inside for text, inside in stemmed if text == "the kettle whistles in the morning"]
    assert mine == [False]
    hits = service.search("a", "kettle").hits
    assert [h.entry.content for h in hits] == ["the kettle whistles in the morning"]


def test_a_step_read_before_the_lock_is_taken_as_read_and_what_changed_since_follows(
    in_daemon: MemoryService,
) -> None:
    """A step of the words is read and stemmed with no lock held, then taken in as read:
    a row changed meanwhile has a later change, which the next step takes in; a step
    whose index moved meanwhile is read again, and nothing is taken in twice."""
    service = in_daemon
    keyword = service.upkeep.indexes["keyword"]
    service.upkeep.follow_saves()  # built, empty
    arrive(service, "a", ["the kettle is blue"])
    step = upcoming(service.index_db, keyword)
    assert step is not None and [r.content for r in step.rows] == ["the kettle is blue"]
    with write_transaction(service.db):  # changed after the step was read
        service.db.execute("UPDATE memory_entries SET content = 'the kettle is red'")
    with write_transaction(service.index_db):
        assert take_step(service.index_db, keyword, step) == 1
    taken_as_read = service.index_db.execute("SELECT folded FROM memory_fts").fetchall()
    assert taken_as_read == [("the kettle is blue",)]  # nothing read again under the lock
    with write_transaction(service.index_db):  # the index moved on: read again, up to
        assert take_step(service.index_db, keyword, step) == 0  # where it went, not twice
    with write_transaction(service.index_db):
        assert catch_up(service.index_db, keyword) == 1  # the update
    assert pending(service.index_db, keyword) == 0
    folded = service.index_db.execute("SELECT folded FROM memory_fts").fetchall()
    assert folded == [("the kettle is red",)]


def test_the_words_meeting_a_lock_after_a_mirror_leave_the_rows_and_catch_up_later(
    in_daemon: MemoryService, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The words follow a mirror in a transaction of their own: when that one meets a
    lock (an expected wait), the mirror's rows stand, nothing is logged as a failure, and
    the words take the rows in before the next search."""
    import sqlite3

    service = in_daemon
    service.save("a", "the kettle is on the shelf")

    def locked() -> int:
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(service.upkeep, "take_a_step", locked)
    service.save("a", "the teapot is in the cupboard")
    held = service.db.execute("SELECT content FROM memory_entries WHERE agent = 'a'")
    assert sorted(row[0] for row in held) == [
        "the kettle is on the shelf",
        "the teapot is in the cupboard",
    ]
    assert service.saving.unmirrored_agents == []
    assert backlog_of(service)["keyword"] == 1
    assert "did not follow" not in caplog.text
    assert service.upkeep.follow_saves() == 2  # the row, into each words index
    assert backlog_of(service)["keyword"] == 0


def test_a_stop_ends_the_indexers_step_mid_backlog_quietly(
    in_daemon: MemoryService, caplog: pytest.LogCaptureFixture
) -> None:
    """A daemon that stops does not wait for the step its indexer is embedding (256 texts
    at nice 10 can take longer than a stop may on a busy machine; a native thread still
    in the model when the interpreter exits aborts the process): the step stops at its
    next texts, nothing of it is kept (it is derived: made at the next start), and the
    thread ends without a failure logged."""
    service = in_daemon
    arrive(service, "pulled", [f"pulled note {n} about kettles" for n in range(600)])
    vectors = service.upkeep.vector_index()
    assert vectors is not None
    embedder = vectors.embedder
    begun: list[str] = []
    embedding = threading.Event()
    original = embedder._run  # type: ignore[attr-defined]

    def noting(text: str) -> Any:
        begun.append(text)
        if len(begun) == 5:
            embedding.set()
        return original(text)

    embedder._run = noting  # type: ignore[attr-defined]
    indexer = Indexer(service)
    indexer.start()
    assert embedding.wait(timeout=120), "the indexer never began to embed"
    indexer.stop()
    assert not indexer.alive
    assert len(begun) < vectors.batch  # the step did not run to its end
    assert backlog_of(service)["vectors"] == 600  # and left nothing half taken in
    assert indexer.last_error is None
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_the_index_summary_is_one_snapshot_a_step_committed_meanwhile_shows_in_none(
    in_daemon: MemoryService, workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Health reads every index's backlog in one snapshot: the words indexes, taken in
    by one write, are never shown one caught up and the other not."""
    service = in_daemon
    arrive(service, "pulled", [f"pulled note {n} about kettles" for n in range(50)])
    other = MemoryService(workspace, Config.load(workspace.config_path))
    real, reads = upkeep_module.pending, []

    def pending_then_a_step(db: Any, index: Any, agent: str | None = None) -> int | None:
        counted = real(db, index, agent)
        reads.append(index.name)
        if len(reads) == 1:  # another connection takes the rows into the words meanwhile
            other.catch_up_indexes()
        return counted

    monkeypatch.setattr(upkeep_module, "pending", pending_then_a_step)
    try:
        summary = service.upkeep.index_summary()
    finally:
        other.close()
    assert reads[:2] == ["keyword", "bm25"]
    assert (summary["keyword"]["pending"], summary["bm25"]["pending"]) == (50, 50)
    assert service.upkeep.index_summary()["bm25"]["pending"] == 0  # then as committed
