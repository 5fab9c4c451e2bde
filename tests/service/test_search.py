"""Search by meaning and words (issue 11): the real embedder, offline, and its surfaces."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.daemon import RunningDaemon, daemon
from support.embed_server import embeddings_server
from support.processes import run_cli, run_offline
from support.sync import Background, index_sql, sql, wait_until

from oryxmem.client import Client
from oryxmem.config import Config, set_value
from oryxmem.errors import EmbedderUnavailableError, EmptyKeywordError, InvalidFieldError
from oryxmem.index import bm25 as bm25_module
from oryxmem.index import catch_up, read_index_state
from oryxmem.index.bm25 import BM25Index
from oryxmem.search import MODES
from oryxmem.service import MemoryService
from oryxmem.store.db import write_transaction
from oryxmem.store.format import render_entry_line
from oryxmem.store.indexfile import index_path
from oryxmem.workspace import Workspace

FIXTURE = Path(__file__).parent / "fixtures" / "recall-bilingual.json"
MEMORY = [
    "User likes tea, green tea in the morning.",
    'trigger: user="fix the CI" reply="pinned pytest to 8.x"',
    "Shipped release 1.4 to production.",
    "用户偏好深色模式，夜里写代码。",
]


def fill(workspace: Workspace, agent: str, contents: list[str]) -> None:
    service = MemoryService(workspace, Config.load(workspace.config_path))
    for content in contents:
        service.save(agent, content)
    service.close()


@pytest.fixture
def service(workspace: Workspace) -> Iterator[MemoryService]:
    fill(workspace, "coder", MEMORY)
    svc = MemoryService(workspace, Config.load(workspace.config_path))
    yield svc
    svc.close()


def contents(hits: list) -> list[str]:  # type: ignore[type-arg]
    return [hit.entry.content for hit in hits]


def test_a_search_finds_by_meaning_what_no_word_finds(service: MemoryService) -> None:
    result = service.search("coder", "what beverage does she enjoy", limit=2)
    assert contents(result.hits)[0] == MEMORY[0]
    assert result.hits[0].arms == ("semantic",)  # not a word in common
    assert result.unembedded == 0
    # And recall_memory (memory.recall = hybrid, the default) answers it too...
    assert service.recall("coder", "what does the user drink").lines[0].endswith(MEMORY[0])
    # ...which keyword recall cannot: no entry holds the words.
    set_value(service.workspace.config_path, "memory.recall", "keyword")
    exact = MemoryService(service.workspace, Config.load(service.workspace.config_path))
    assert exact.recall("coder", "what does the user drink").lines == []
    exact.close()


def test_what_was_saved_a_moment_ago_is_found_by_meaning_before_the_indexer_has_it(
    service: MemoryService,
) -> None:
    """The daemon's service leaves embedding to its indexer thread; a search embeds the
    few rows changed since the indexer's last step itself, and leaves out the vectors
    of the texts they no longer hold."""
    service.search("coder", "warm up")  # every row embedded so far
    service.shared.index_upkeep = False  # as in the daemon: nothing more is embedded
    service.save("coder", "Drives a red bicycle to the office.")
    found = service.search("coder", "how does she commute", limit=1, mode="semantic")
    assert contents(found.hits) == ["Drives a red bicycle to the office."]
    assert found.unembedded == 0
    with write_transaction(service.db):  # another program rewrites the tea entry
        service.db.execute(
            "UPDATE memory_entries SET content = 'Owns a grey cat.' WHERE content = ?",
            [MEMORY[0]],
        )
    drinks = service.search("coder", "what does the user drink", limit=4, mode="semantic")
    assert MEMORY[0] not in contents(drinks.hits)  # its old vector is not used
    pets = service.search("coder", "which pet does she have", limit=1, mode="semantic")
    assert contents(pets.hits) == ["Owns a grey cat."]
    assert service.recall("coder", "how does she commute").lines[0].endswith("office.")


def test_a_chinese_query_finds_a_two_character_word_inside_a_sentence(
    service: MemoryService,
) -> None:
    result = service.search("coder", "深色", limit=1)
    assert contents(result.hits) == [MEMORY[3]]
    assert "keyword" in result.hits[0].arms  # the bigram 深色, not only the model
    assert service.recall("coder", "深色").lines[0].endswith(MEMORY[3])


def test_a_recall_answers_only_what_is_related(service: MemoryService) -> None:
    """Hybrid recall of a word in a small memory is that entry, not the whole memory."""
    assert [line.split("] ", 1)[1] for line in service.recall("coder", "ci").lines] == [MEMORY[1]]


def test_the_whole_query_held_by_an_entry_comes_first(service: MemoryService) -> None:
    service.save("coder", "before the storm we closed the windows")
    service.save("coder", "typed during the storm")
    assert service.recall("coder", "during the storm").lines[0].endswith("typed during the storm")
    assert "exact" in service.search("coder", "during the storm").hits[0].arms


def test_the_whole_query_inside_a_word_is_found_by_meaning_and_still_comes_first(
    service: MemoryService,
) -> None:
    """'ploy' is no word of 'we deploy on fridays' (the words arm does not bring it), but
    the entry holds it: the meaning arm brings it, and it is checked as well."""
    service.save("coder", "we deploy on fridays")
    first = service.search("coder", "ploy").hits[0]
    assert first.entry.content == "we deploy on fridays"
    assert first.arms == ("exact", "semantic")


def test_a_word_grown_common_since_the_last_search_is_left_out_of_the_next(
    service: MemoryService,
) -> None:
    """The words arm matches only words held by at most half of the entries (when rarer
    ones remain); how many hold each is remembered by the state of the index, so a
    search after entries changed counts again."""
    for n in range(10):
        service.save("coder", f"Filler note number {n}.")
    # each word held by 3 of 14 (an entry, and the two after it by their context)
    before = contents(service.search("coder", "tea release", mode="keyword").hits)
    assert MEMORY[0] in before and MEMORY[2] in before
    assert contents(service.search("coder", "tea release", mode="keyword").hits) == before
    fillers = service.search("coder", "filler", mode="keyword", limit=10).hits
    # as many entries as before (so each word is counted up to the same cap), but 8 of
    # them hold "tea" now: with the tea entry, more than half of them
    service.edit("coder", (), {hit.entry.entry_id: "Tea tasting." for hit in fillers[:8]})
    after = contents(service.search("coder", "tea release", mode="keyword").hits)
    assert MEMORY[2] in after and not any("tea" in hit.casefold() for hit in after)


def test_scores_are_from_0_to_1_and_nothing_scored_0_is_a_hit(service: MemoryService) -> None:
    service.save("coder", "typed during the storm")
    for mode in MODES:
        hits = service.search("coder", "during the storm", mode=mode).hits
        assert hits and all(0 < hit.score <= 1 for hit in hits), (mode, hits)
    first = service.search("coder", "during the storm").hits[0]
    assert "exact" in first.arms and first.entry.content == "typed during the storm"


def test_the_cli_search_shows_content_as_show_does(workspace: Workspace) -> None:
    assert run_cli("save", "--agent", "coder", "line one\nline two about tea").returncode == 0
    shown = run_cli("show", "--agent", "coder").stdout
    found = run_cli("search", "--agent", "coder", "tea").stdout
    assert "line one\\nline two about tea" in shown
    assert "line one\\nline two about tea" in found and "\\\\n" not in found
    score = float(found.split()[0])
    assert 0 < score <= 1


def test_a_search_by_meaning_with_no_embedder_says_why_there_is_nothing(
    workspace: Workspace,
) -> None:
    fill(workspace, "coder", MEMORY)
    set_value(workspace.config_path, "recall.embedder", "none")
    done = run_cli("search", "--agent", "coder", "--mode", "semantic", "tea")
    assert done.returncode == 1 and done.stdout == ""
    assert "search by meaning is off (recall.embedder = none)" in done.stderr
    words = run_cli("search", "--agent", "coder", "tea")  # hybrid: by words, as configured
    assert words.returncode == 0 and MEMORY[0] in words.stdout and words.stderr == ""


def test_hybrid_recall_on_a_bilingual_memory(workspace: Workspace) -> None:
    """The quality check of the default suite: a memory of 25 entries in English and
    Chinese, 21 questions (paraphrases, words, 'when did', Chinese). Each must be
    answered within the first three of a hybrid search, where the keyword arm alone
    answers 14 and the semantic arm alone 18; hybrid recall (which leaves out what is
    neither held by a word nor close in meaning) answers 20 (measured when this was
    written: 'continuous integration' is not close enough to 'CI' for MiniLM)."""
    data = json.loads(FIXTURE.read_text(encoding="utf-8"))
    path = workspace.memory_path("ada")
    path.parent.mkdir(parents=True)
    lines = [render_entry_line(ts, content) for ts, content in data["entries"]]
    path.write_text("## 归档记忆\n" + "\n".join(lines) + "\n", encoding="utf-8")
    service = MemoryService(workspace, Config.load(workspace.config_path))
    service.sync()
    service.reindex()
    answered: dict[str, list[bool]] = {mode: [] for mode in (*MODES, "recall")}
    for question in data["questions"]:
        wanted = {data["entries"][i][1] for i in question["answers"]}
        for mode in MODES:
            found = contents(service.search("ada", question["question"], limit=3, mode=mode).hits)
            answered[mode].append(bool(wanted & set(found)))
        recalled = {
            line.split("] ", 1)[1] for line in service.recall("ada", question["question"]).lines
        }
        answered["recall"].append(bool(wanted & recalled))
    service.close()
    total = len(data["questions"])
    assert sum(answered["hybrid"]) == total, answered
    assert sum(answered["recall"]) >= total - 1, answered
    assert sum(answered["keyword"]) < total and sum(answered["semantic"]) < total


def test_the_default_embedder_runs_with_no_network_at_all(workspace: Workspace) -> None:
    """In a network namespace of its own (no interface but a down loopback), with every
    socket connection the Python side attempts recorded: the model loads, embeds and
    searches, and nothing tried to connect anywhere."""
    fill(workspace, "coder", MEMORY)
    script = (
        "from oryxmem.service import MemoryService\n"
        "service = MemoryService.open()\n"
        "hits = service.search('coder', 'what does the user drink', limit=1).hits\n"
        "assert hits[0].entry.content.startswith('User likes tea'), hits\n"
    )
    run_offline(script, workspace.root)
    assert not (workspace.root / ".cache").exists(), "nothing wrote a cache under HOME"


def test_vectors_are_derived_dropped_they_are_made_again(service: MemoryService) -> None:
    before = contents(service.search("coder", "hot drinks").hits)
    index_sql(
        service.workspace,
        "DROP TABLE memory_vector_rows; DROP TABLE memory_vectors; DROP TABLE memory_vector_gone;"
        " DELETE FROM index_state WHERE name = 'vectors'",
    )
    fresh = MemoryService(service.workspace, Config.load(service.workspace.config_path))
    assert contents(fresh.search("coder", "hot drinks").hits) == before
    assert read_index_state(fresh.index_db, fresh.vector_index()) is not None  # type: ignore[arg-type]
    fresh.close()


def test_the_index_file_deleted_is_made_again_from_the_rows(service: MemoryService) -> None:
    """Everything in .oryxos/oryxos.db.indexes is derived: deleted (its -wal and -shm too), the
    next search makes it again and answers as before."""
    before = contents(service.search("coder", "hot drinks").hits)
    service.close()
    for name in ("oryxos.db.indexes", "oryxos.db.indexes-wal", "oryxos.db.indexes-shm"):
        (service.workspace.db_path.parent / name).unlink(missing_ok=True)
    fresh = MemoryService(service.workspace, Config.load(service.workspace.config_path))
    while fresh.embed_step():
        pass
    assert contents(fresh.search("coder", "hot drinks").hits) == before
    assert index_sql(fresh.workspace, "SELECT count(*) FROM memory_vector_rows").strip() == str(
        len(MEMORY)
    )
    fresh.close()


def test_vectors_stored_by_the_previous_version_are_carried_over_not_embedded_again(
    service: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A workspace an older oryxmem kept keeps its vectors: they were in the rows' file
    (version 1 of the table: keyed by the text's hash, WITHOUT ROWID); they are carried
    into the index file and into today's table, the index's cursor where it was, no row
    embedded again, and nothing derived is left in the rows' file."""
    from oryxmem.index import vectors as vectors_module

    while service.embed_step():
        pass
    before = contents(service.search("coder", "hot drinks", mode="semantic").hits)
    vectors = service.vector_index()
    assert vectors is not None
    cursor = read_index_state(service.index_db, vectors).cursor  # type: ignore[union-attr]
    service.close()
    as_an_older_oryxmem_kept_it(service.workspace, vectors._identity_at(1))
    vectors_module._MATRICES.clear()  # as a new process

    def no_embedding(*args: Any) -> None:
        raise AssertionError("a carried-over vector was embedded again")

    fresh = MemoryService(service.workspace, Config.load(service.workspace.config_path))
    index = fresh.vector_index()
    assert index is not None
    monkeypatch.setattr(index.embedder, "embed_backlog", no_embedding)
    assert fresh.embed_step() == 0  # carried over, and nothing left to embed
    assert contents(fresh.search("coder", "hot drinks", mode="semantic").hits) == before
    state = read_index_state(fresh.index_db, index)
    assert state is not None and (state.identity, state.cursor) == (index.identity(), cursor)
    shape = index_sql(
        fresh.workspace, "SELECT sql FROM sqlite_master WHERE name = 'memory_vectors'"
    )
    assert "WITHOUT ROWID" not in shape and "id INTEGER PRIMARY KEY" in shape
    counted = index_sql(fresh.workspace, "SELECT count(*) FROM main.memory_vectors")
    assert counted.strip() == str(len(MEMORY))
    left = sql(
        fresh.workspace,
        "SELECT name FROM sqlite_master WHERE name LIKE 'memory_vector%'"
        " OR name IN ('index_state', 'memory_fts', 'memory_terms')",
    )
    assert left.strip() == ""
    fresh.close()


def as_an_older_oryxmem_kept_it(workspace: Workspace, old_identity: int) -> None:
    """Put the workspace's vectors back where an oryxmem before the index file kept them:
    in the rows' file, with index_state, as version 1 of the table; the index file gone,
    and the rows' file's last migration not yet applied."""
    rows_file = sqlite3.connect(workspace.db_path, isolation_level=None)
    rows_file.execute("ATTACH DATABASE ? AS idx", [str(index_path(workspace.db_path))])
    rows_file.execute("BEGIN IMMEDIATE")
    made = rows_file.execute(
        "SELECT name, sql FROM idx.sqlite_master WHERE sql IS NOT NULL AND tbl_name IN"
        " ('memory_vector_rows', 'memory_vector_gone', 'index_state') ORDER BY type = 'index'"
    ).fetchall()
    for name, statement in made:
        rows_file.execute(statement)
        if statement.startswith("CREATE TABLE"):
            rows_file.execute(f"INSERT INTO main.{name} SELECT * FROM idx.{name}")
    rows_file.execute(
        "CREATE TABLE memory_vectors (key TEXT PRIMARY KEY, vector BLOB NOT NULL) WITHOUT ROWID"
    )
    rows_file.execute("INSERT INTO main.memory_vectors SELECT key, vector FROM idx.memory_vectors")
    rows_file.execute(
        "UPDATE main.index_state SET version = ? WHERE name = 'vectors'", [old_identity]
    )
    rows_file.execute("DROP TABLE store_identity")
    rows_file.execute(
        "DELETE FROM _sqlite_migrations WHERE name = 'derived_indexes_have_a_file_of_their_own'"
    )
    rows_file.execute("COMMIT")
    rows_file.execute("DETACH DATABASE idx")
    rows_file.close()
    for name in ("oryxos.db.indexes", "oryxos.db.indexes-wal", "oryxos.db.indexes-shm"):
        (workspace.db_path.parent / name).unlink(missing_ok=True)


def test_another_embedder_embeds_everything_again(workspace: Workspace) -> None:
    fill(workspace, "coder", MEMORY)
    with embeddings_server() as (url, seen):
        for key, value in (
            ("recall.embedder", "openai-compatible"),
            ("recall.embedder_url", url),
            ("recall.embedder_model", "nomic-embed-text"),
            ("recall.embedder_key_env", "ORYXMEM_TEST_EMBED_KEY"),
        ):
            set_value(workspace.config_path, key, value)
        os.environ["ORYXMEM_TEST_EMBED_KEY"] = "s3cret"
        try:
            service = MemoryService(workspace, Config.load(workspace.config_path))
            result = service.search("coder", "green tea morning", limit=1)
        finally:
            del os.environ["ORYXMEM_TEST_EMBED_KEY"]
        assert contents(result.hits) == [MEMORY[0]]
        embedded = [text for request in seen.requests for text in request["input"]]  # type: ignore[attr-defined]
        assert set(MEMORY) <= set(embedded), "every entry embedded by the new model"
        assert {request["model"] for request in seen.requests} == {"nomic-embed-text"}
        assert set(seen.authorization) == {"Bearer s3cret"}
        vectors = service.vector_index()
        assert vectors is not None and vectors.embedder.model_id.endswith("#nomic-embed-text")
        service.close()


@pytest.mark.parametrize("mode", ["fail", "garbage"])
def test_an_embeddings_server_that_fails_is_a_clear_error_and_keywords_still_work(
    workspace: Workspace, mode: str
) -> None:
    fill(workspace, "coder", MEMORY)
    with embeddings_server() as (url, seen):
        set_value(workspace.config_path, "recall.embedder", "openai-compatible")
        set_value(workspace.config_path, "recall.embedder_url", url)
        set_value(workspace.config_path, "recall.embedder_model", "m")
        seen.mode = mode
        service = MemoryService(workspace, Config.load(workspace.config_path))
        with pytest.raises(EmbedderUnavailableError, match="did not answer as expected"):
            service.search("coder", "tea", mode="semantic")
        hybrid = service.search("coder", "tea")  # by words, and it says why
        assert contents(hybrid.hits)[0] == MEMORY[0]
        assert hybrid.note and "searched by words only" in hybrid.note
        assert service.recall("coder", "tea").lines[0].endswith(MEMORY[0])
        assert contents(service.search("coder", "tea", mode="keyword").hits)[0] == MEMORY[0]
        service.close()
        done = run_cli("search", "--agent", "coder", "tea")  # the reason, said once
        assert done.returncode == 0 and done.stderr.count("searched by words only") == 1, (
            done.stderr
        )


def test_an_embedder_that_does_not_answer_never_holds_up_a_save(
    workspace: Workspace, tmp_path: Path
) -> None:
    """Searches run on the daemon's reader threads: one waiting for its query's embedding
    leaves the memory thread free, so saves (and everything but ranking) go on."""
    fill(workspace, "coder", MEMORY)
    with embeddings_server() as (url, seen):
        set_value(workspace.config_path, "recall.embedder", "openai-compatible")
        set_value(workspace.config_path, "recall.embedder_url", url)
        set_value(workspace.config_path, "recall.embedder_model", "m")
        with daemon(workspace, tmp_path / "d.log") as running, Client(running.socket) as client:
            wait_until(lambda: client.health()["indexes"]["vectors"]["pending"] == 0)
            seen.mode = "held"
            found: list[str] = []

            def search() -> None:
                with Client(running.socket) as other:
                    hits = other.search("coder", "green tea", 1, "semantic")["hits"]
                    found.extend(hit["content"] for hit in hits)

            waiting = Background(search)
            waiting.start()
            wait_until(lambda: any(r["input"] == ["green tea"] for r in seen.requests))
            for n in range(5):
                client.save("coder", f"saved while the embedder says nothing {n}")
            words = client.search("coder", "embedder says nothing", 10, "keyword")["hits"]
            assert len(words) == 5 and client.health()["status"] == "ok"
            assert waiting.is_alive(), "the search still waits for its embedding"
            seen.released.set()
            waiting.join()
            assert found == [MEMORY[0]]


def test_a_row_taken_in_early_as_a_dependent_is_not_taken_in_twice(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: catching up in steps smaller than the rows to take in, the keyword arm
    took a row in as the context of the one before it, then again as a change of its
    own (sqlite3.IntegrityError)."""
    service = MemoryService(workspace, Config.load(workspace.config_path))
    index = BM25Index()
    monkeypatch.setattr(BM25Index, "batch", 3)
    with write_transaction(service.index_db):
        catch_up(service.index_db, index)
    for n in range(10):
        sql(workspace, f"INSERT INTO memory_entries(agent, content) VALUES ('coder', 'row {n}')")
    with write_transaction(service.index_db):
        catch_up(service.index_db, index)
    counted = service.index_db.execute("SELECT entries FROM memory_terms_count").fetchone()[0]
    assert (
        counted == 10 == service.index_db.execute("SELECT count(*) FROM memory_terms").fetchone()[0]
    )
    service.close()


def test_a_query_of_only_the_commonest_words_is_ranked_among_the_newest_holding_them(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A word most of a large memory holds would have BM25 score all of it: the keyword
    arm then ranks only the newest COMMON_ENTRIES entries holding it."""
    monkeypatch.setattr(bm25_module, "COMMON_ENTRIES", 5)
    fill(workspace, "coder", [f"coffee note {n}" for n in range(12)] + ["tea note"])
    service = MemoryService(workspace, Config.load(workspace.config_path))
    found = service.search("coder", "coffee", limit=20, mode="keyword")
    newest = {f"coffee note {n}" for n in range(8, 12)} | {"tea note"}  # by its context
    assert set(contents(found.hits)) == newest
    rare = service.search("coder", "tea coffee", limit=20, mode="keyword")
    assert contents(rare.hits)[0] == "tea note"  # a rarer word: matched as ever
    service.close()


def test_a_word_no_entry_holds_never_crowds_out_one_every_entry_holds(
    workspace: Workspace,
) -> None:
    """In a memory of one entry each of its words is held by all entries: the question's
    other words (held by none) must not leave it out of the keyword arm."""
    service = MemoryService(workspace, Config.load(workspace.config_path))
    service.save("gem", "The user prefers short answers.")
    found = service.search("gem", "how long should answers be?", mode="keyword")
    assert contents(found.hits) == ["The user prefers short answers."]
    service.close()


def test_each_agent_is_searched_alone_and_no_agent_name_is_a_word(
    workspace: Workspace,
) -> None:
    """The words arm asks FTS5 for the range of keys of the agent's own entries: another
    agent's entries are never ranked, and an agent's name is no word of its texts."""
    fill(workspace, "coder", ["User likes tea.", "The tea agent reviews code."])
    fill(workspace, "tea", ["Steep it for three minutes.", "User likes tea, green."])
    service = MemoryService(workspace, Config.load(workspace.config_path))
    coder = service.search("coder", "tea", limit=10, mode="keyword")
    assert set(contents(coder.hits)) == {"User likes tea.", "The tea agent reviews code."}
    tea = service.search("tea", "tea", limit=10, mode="keyword")
    assert contents(tea.hits) == ["User likes tea, green."]
    assert not service.search("tea", "reviews code", mode="keyword").hits  # coder's words
    assert not service.search("nobody", "tea", mode="keyword").hits  # no entry, no slot
    service.close()


def test_a_words_index_of_the_previous_version_is_made_again_keyed_by_agent(
    workspace: Workspace,
) -> None:
    """Version 3 kept no steps (held.py's copies read them): an index file of that
    version is made again, its entries keyed by their agent's slot with the step that
    wrote them, and searches answer as before."""
    fill(workspace, "coder", MEMORY)
    service = MemoryService(workspace, Config.load(workspace.config_path))
    before = contents(service.search("coder", "tea production", mode="keyword").hits)
    with write_transaction(service.index_db):
        service.index_db.execute("UPDATE index_state SET version = 3 WHERE name = 'bm25'")
    service.close()
    service = MemoryService(workspace, Config.load(workspace.config_path))
    assert contents(service.search("coder", "tea production", mode="keyword").hits) == before
    state = read_index_state(service.index_db, BM25Index())
    assert state is not None and state.identity == BM25Index.version == 4
    db = service.index_db
    ((slot,),) = db.execute("SELECT slot FROM memory_terms_agents WHERE agent = 'coder'")
    keyed = db.execute("SELECT row_id, key FROM memory_terms_keys WHERE step > 0").fetchall()
    assert len(keyed) == len(MEMORY)
    assert all(key == slot << bm25_module.KEY_BITS | row_id for row_id, key in keyed)
    assert sorted(k for (k,) in db.execute("SELECT rowid FROM memory_terms")) == sorted(
        key for _, key in keyed
    )
    service.close()


def test_an_entry_edited_or_forgotten_leaves_the_words_by_its_key(
    workspace: Workspace,
) -> None:
    """An entry's key is found by its row id when it changes or goes: the words index
    holds each entry once, under its agent's key, as the rows do."""
    fill(workspace, "coder", ["alpha one", "alpha two", "alpha three"])
    fill(workspace, "tea", ["alpha four"])
    service = MemoryService(workspace, Config.load(workspace.config_path))
    ids = {hit.entry.content: hit.entry.entry_id for hit in service.search("coder", "alpha").hits}
    service.edit("coder", (), {ids["alpha two"]: "beta two"})
    service.forget("coder", [ids["alpha three"]])

    def by_own_words(agent: str, query: str) -> list[str]:
        hits = service.search(agent, query, mode="keyword").hits
        return [hit.entry.content for hit in hits if "keyword" in hit.arms]

    assert by_own_words("coder", "alpha") == ["alpha one"]
    assert by_own_words("coder", "beta") == ["beta two"]
    assert by_own_words("tea", "alpha") == ["alpha four"]
    db = service.index_db
    rows = db.execute("SELECT id FROM memory_entries").fetchall()
    keys = db.execute("SELECT row_id FROM memory_terms_keys").fetchall()
    assert sorted(rows) == sorted(keys)
    assert db.execute("SELECT count(*) FROM memory_terms").fetchone()[0] == len(rows) == 3
    service.close()


def test_a_search_answers_the_same_first_hits_whatever_its_limit(
    service: MemoryService,
) -> None:
    """A search ranks in full only as many as it answers (when no scope or similarity
    floor may leave some out): its first hits are those of a longer search."""
    service.save("coder", "The user drinks tea while the CI runs.")
    service.save("coder", "Tea is green; the CI is green too.")
    for query in ("tea", "the CI", "green tea in the morning"):
        every = contents(service.search("coder", query, limit=50).hits)
        for limit in (1, 2, 3):
            assert contents(service.search("coder", query, limit=limit).hits) == every[:limit]
        archival = contents(service.search("coder", query, limit=2, scope="archival").hits)
        assert archival == every[:2]  # (every entry here is archival)


def test_bad_searches_are_clear_errors(service: MemoryService) -> None:
    with pytest.raises(EmptyKeywordError):
        service.search("coder", "  ")
    with pytest.raises(InvalidFieldError, match="mode must be one of"):
        service.search("coder", "tea", mode="fuzzy")


def test_the_cli_offers_the_search_modes() -> None:
    from oryxmem.cli.memory import SEARCH_MODES

    assert SEARCH_MODES == MODES


@pytest.fixture
def running(workspace: Workspace, tmp_path: Path) -> Iterator[RunningDaemon]:
    fill(workspace, "coder", MEMORY)
    with daemon(workspace, tmp_path / "daemon.log") as proc:
        with Client(proc.socket) as client:  # the indexer thread embeds them first
            wait_until(lambda: client.health()["indexes"]["vectors"]["pending"] == 0)
        yield proc


def test_search_over_the_socket_the_client_the_cli_and_the_tool(
    workspace: Workspace, running: RunningDaemon
) -> None:
    status, reply = running.curl("http://x/api/v1/agents/coder/memory/search?q=beverage&k=1")
    assert status == 200 and reply["code"] == 0
    [hit] = reply["data"]["hits"]
    assert hit["content"] == MEMORY[0] and hit["arms"] == ["semantic"] and 0 < hit["score"] <= 1
    assert reply["data"]["mode"] == "hybrid"
    status, reply = running.curl("http://x/api/v1/agents/coder/memory/search?q=tea&mode=keyword")
    arms = {h["content"]: h["arms"] for h in reply["data"]["hits"]}
    assert arms[MEMORY[0]] == ["exact", "keyword"]  # the entries after it: by their context
    assert all(a == ["context"] for c, a in arms.items() if c != MEMORY[0])
    for query, code in (
        ("q=tea&k=0", 1002),
        ("q=tea&k=x", 1002),
        ("q=tea&mode=nope", 1002),
        ("q=", 1009),
    ):
        status, reply = running.curl(f"http://x/api/v1/agents/coder/memory/search?{query}")
        assert (status, reply["code"]) == (400, code), (query, reply)
    status, reply = running.curl("http://x/api/v1/memory/search?q=anything")
    assert status == 200 and reply["data"]["agent"] == ""
    with Client(running.socket) as client:
        assert client.search("coder", "hot drink", 1)["hits"][0]["content"] == MEMORY[0]
        tool = client.recall_memory_tool(
            {"query": "what does the user drink", "limit": 1}, agent="coder"
        )
        assert tool["strategy"] == "hybrid" and len(tool["lines"]) == 1
        assert tool["lines"][0].endswith(MEMORY[0])
        capped = client.recall_memory_tool({"keyword": "e", "limit": 2}, agent="coder")
        assert len(capped["lines"]) <= 2
        with pytest.raises(InvalidFieldError, match="'limit'"):
            client.recall_memory_tool({"query": "tea", "limit": 1000}, agent="coder")
    done = run_cli("search", "-a", "coder", "-k", "1", "--json", "hot drink")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["hits"][0]["content"] == MEMORY[0]
    done = run_cli("search", "-a", "coder", "深色")
    assert done.stdout.splitlines()[0].endswith(MEMORY[3]) and "keyword" in done.stdout
    # The records go in with the daemon's next mirror (within a second), not before the answer.
    calls = "SELECT tool, ok, input FROM tool_invocations ORDER BY id"
    wait_until(lambda: sql(workspace, calls).strip() != "")
    tools = sql(workspace, calls).splitlines()
    assert tools[0].startswith('recall_memory|1|{"query"')


def test_a_search_over_the_socket_sees_each_save_answered_before_it_and_others_rows(
    workspace: Workspace, running: RunningDaemon
) -> None:
    """A search is answered on a reader at once when the rows hold every save answered
    so far and the words every row; else the memory thread brings them up first: a save
    answered a moment ago is found, and so is a row another program wrote."""
    with Client(running.socket) as client:
        for n in range(30):
            client.save("coder", f"kumquat number {n}")
            hits = client.search("coder", f"kumquat number {n}", limit=1, mode="keyword")
            assert hits["hits"][0]["content"] == f"kumquat number {n}"
        sql(workspace, "INSERT INTO memory_entries(agent, content) VALUES ('coder', 'a quince')")
        wait_until(lambda: bool(client.search("coder", "quince", mode="keyword")["hits"]))
        found = client.search("coder", "quince", mode="keyword")
        assert found["hits"][0]["content"] == "a quince" and found["pending"]["words"] == 0


def test_a_backlog_is_in_the_words_before_the_vectors_and_searches_say_what_they_miss(
    workspace: Workspace, running: RunningDaemon
) -> None:
    path = workspace.memory_path("backlog")
    path.parent.mkdir(parents=True)
    lines = [
        render_entry_line("2026-07-22 09:30:00", f"backlog note {n} about kettles")
        for n in range(1200)
    ]
    path.write_text("## 归档记忆\n" + "\n".join(lines) + "\n", encoding="utf-8")
    with Client(running.socket) as client:
        rows = "SELECT count(*) FROM memory_entries WHERE agent = 'backlog'"
        wait_until(lambda: sql(workspace, rows).strip() == "1200")  # the file is taken in
        answered = client.search("backlog", "kettles", 5)  # the indexer has barely begun
        # A backlog of the words is the indexer's: a search does not wait for it, and
        # says what it has not seen yet.
        assert len(answered["hits"]) == 5 or answered["pending"]["words"] > 0
        # The words take it in first; the vectors after.
        seen: list[dict[str, dict[str, float]]] = []
        wait_until(
            lambda: seen.append(client.health()["indexes"]) or seen[-1]["bm25"]["pending"] == 0,
            timeout=60,
        )
        assert seen[-1]["keyword"]["pending"] == 0 and seen[-1]["vectors"]["pending"] > 0
        assert seen[-1]["bm25"]["rate"] > 0  # health says the pace too
        answered = client.search("backlog", "kettles", 5)
        assert len(answered["hits"]) == 5 and answered["pending"]["words"] == 0
        missing = [answered["unembedded"]]
        wait_until(
            lambda: (
                missing.append(client.search("backlog", "kettles", 5)["unembedded"])
                or missing[-1] == 0
            ),
            timeout=120,
        )
        assert max(missing) > 0, "the search said what it had not embedded yet"
        assert answered["pending"]["meaning"] == answered["unembedded"]
        assert client.health()["indexes"]["vectors"]["pending"] == 0


def test_reindex_with_and_without_the_daemon(workspace: Workspace, tmp_path: Path) -> None:
    fill(workspace, "coder", MEMORY)
    done = run_cli("reindex", env={"ORYXMEM_NO_DAEMON": "1"})
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"reindexed every agent: {len(MEMORY)} entries embedded\n"
    with daemon(workspace, tmp_path / "d.log"):
        done = run_cli("reindex", "--agent", "coder", "--json")
        assert done.returncode == 0, done.stderr
        data = json.loads(done.stdout)
        assert data["agent"] == "coder" and data["indexes"]["vectors"]["pending"] == 0
        assert run_cli("search", "-a", "coder", "-k", "1", "hot drinks").stdout.endswith(
            MEMORY[0] + "\n"
        )


def test_a_search_with_no_daemon_right_after_an_editor_added_a_line_finds_it(
    workspace: Workspace,
) -> None:
    """No daemon watched the edit: the search reads the changed file into the rows first."""
    assert run_cli("save", "--agent", "ed", "The user likes green tea.").returncode == 0
    path = workspace.memory_path("ed")
    path.write_text(path.read_text() + "- [2026-07-22 09:30:00] Deploys go through staging.\n")
    env = {"ORYXMEM_NO_DAEMON": "1"}
    found = run_cli("recall", "--agent", "ed", "staging", env=env)
    assert "Deploys go through staging." in found.stdout, found.stderr
    hits = run_cli("search", "--agent", "ed", "-k", "1", "staging", env=env)
    assert "Deploys go through staging." in hits.stdout


def test_the_rarest_of_words_all_common_is_found_by_counting_each_up_to_a_cap(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every query word held by more than COMMON_ENTRIES entries: the rarest is matched,
    counted up to RAREST_CAP (a word past it counts as the cap)."""
    monkeypatch.setattr(bm25_module, "COMMON_ENTRIES", 2)
    monkeypatch.setattr(bm25_module, "RAREST_CAP", 6)
    fill(workspace, "coder", [f"alpha {n}" for n in range(9)] + [f"beta {n}" for n in range(4)])
    service = MemoryService(workspace, Config.load(workspace.config_path))

    def by_own_words() -> set[str]:
        found = service.search("coder", "alpha beta", limit=20, mode="keyword")
        return {hit.entry.content.split()[0] for hit in found.hits if "keyword" in hit.arms}

    assert by_own_words() == {"beta"}  # 4 of them, alpha's 9 counted as 6
    monkeypatch.setattr(bm25_module, "RAREST_CAP", 3)  # both past it: the query's first,
    assert "beta" not in by_own_words()  # alpha, is matched (the newest hold it as context)
    service.close()


def test_vectors_are_read_whole_in_one_pass_or_by_key_and_a_shared_text_serves_both(
    workspace: Workspace,
) -> None:
    """An agent holding most of the vectors is read by one pass over them, one holding few
    by key; a text two agents hold is stored once and found by meaning for both."""
    from oryxmem.index import vectors as vectors_module

    fill(workspace, "big", [f"garden note number {n}" for n in range(30)] + [MEMORY[0]])
    fill(workspace, "small", [MEMORY[0]])
    service = MemoryService(workspace, Config.load(workspace.config_path))
    while service.embed_step():
        pass
    assert index_sql(workspace, "SELECT count(*) FROM memory_vectors").strip() == "31"
    vectors_module._MATRICES.clear()  # as a new process: every agent is read again
    for agent in ("big", "small"):
        result = service.search(agent, "what beverage does she enjoy", limit=1, mode="semantic")
        assert contents(result.hits) == [MEMORY[0]]
    service.close()


def test_the_vector_index_searches_alone_as_every_index_does(service: MemoryService) -> None:
    """DerivedIndex.search: the rows best first, all of them without a limit."""
    vectors = service.vector_index()
    assert vectors is not None
    while service.embed_step():
        pass
    every = vectors.search(service.index_db, "coder", "what beverage does she enjoy", None)
    assert len(every) == len(MEMORY)
    assert [hit.score for hit in every] == sorted((hit.score for hit in every), reverse=True)
    two = vectors.search(service.index_db, "coder", "what beverage does she enjoy", 2)
    assert [hit.row_id for hit in two] == [hit.row_id for hit in every[:2]]
    found = {row[0]: row[1] for row in service.db.execute("SELECT id, content FROM memory_entries")}
    assert found[every[0].row_id] == MEMORY[0]


def test_the_vendored_model_is_checked_before_it_is_loaded(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model is the vendored file and computes in int8 (MatMulInteger); a model
    that is not the expected file is refused with a clear error, not run."""
    from oryxmem.embed import minilm

    with resources.as_file(resources.files("oryxmem.embed") / minilm.MODEL_FILE) as path:
        model = path.read_bytes()
    assert hashlib.sha256(model).hexdigest() == minilm.MODEL_SHA256
    assert b"MatMulInteger" in model and b"DynamicQuantizeLinear" in model
    monkeypatch.setattr(minilm, "_LOADED", [])  # this process loads it again, here
    monkeypatch.setattr(minilm, "MODEL_SHA256", "0" * 64)
    embedder = minilm.MiniLM(Config.load(workspace.config_path))
    with pytest.raises(EmbedderUnavailableError, match=r"the MiniLM model .* not the expected"):
        embedder.embed(["likes tea"], "passage")


def test_a_backlog_is_embedded_side_by_side_each_text_as_alone_at_the_callers_priority(
    workspace: Workspace,
) -> None:
    """A backlog's texts run on the calling thread and a helper of its own, in turn: each
    comes out exactly as it does alone, in its place, and the helper runs at the
    caller's priority (the daemon's indexer runs at nice 10)."""
    from oryxmem.embed import minilm

    embedder = minilm.MiniLM(Config.load(workspace.config_path))
    texts = [
        f"note {i}: the user likes {'green ' * (i % 7)}tea"
        for i in range(minilm.SIDE_BY_SIDE_TEXTS + 8)
    ]
    ran_on: list[tuple[int, int, int]] = []  # (thread, its niceness, the text's place)
    original = embedder._run

    def noting(text: str) -> Any:
        thread = threading.get_native_id()
        ran_on.append((thread, os.getpriority(os.PRIO_PROCESS, thread), texts.index(text)))
        return original(text)

    def embed_lowered() -> Any:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 5)
        return embedder.embed_backlog(texts)

    with ThreadPoolExecutor(1) as lowered:  # a thread of its own, as the indexer is
        embedder._run = noting  # type: ignore[method-assign]
        together = lowered.submit(embed_lowered).result()
        embedder._run = original  # type: ignore[method-assign]
    alone = np.stack([embedder.embed([text], "passage")[0] for text in texts])
    assert np.array_equal(together, alone)
    assert sorted(place for _, _, place in ran_on) == list(range(len(texts)))
    assert {nice for _, nice, _ in ran_on} == {5}
    assert len({thread for thread, _, _ in ran_on}) == 2  # the caller and its helper


def test_a_backlog_being_embedded_stops_at_its_next_text_once_backlogs_are_stopped(
    workspace: Workspace,
) -> None:
    """A daemon that stops does not wait for its indexer's backlog: stop_backlogs (asked
    here from inside the third text, as a stop would come from another thread) ends the
    backlog with BacklogStopped after at most the texts already begun, the helper's
    included, and none is still running once it has raised. A new backlog is refused
    at once."""
    from oryxmem.embed import BacklogStopped, minilm

    embedder = minilm.MiniLM(Config.load(workspace.config_path))
    texts = [f"note {i}: the user likes tea" for i in range(minilm.SIDE_BY_SIDE_TEXTS * 8)]
    begun: list[int] = []
    running = [0]
    original = embedder._run

    def stopping_at_the_third(text: str) -> Any:
        running[0] += 1
        begun.append(texts.index(text))
        if len(begun) == 3:
            embedder.stop_backlogs()
        try:
            return original(text)
        finally:
            running[0] -= 1

    embedder._run = stopping_at_the_third  # type: ignore[method-assign]
    with pytest.raises(BacklogStopped):
        embedder.embed_backlog(texts)
    assert running == [0]  # neither thread is still in the model
    assert 3 <= len(begun) <= 4  # the third, and the other thread's text in flight
    with pytest.raises(BacklogStopped):
        embedder.embed_backlog(texts[:2])
    embedder._run = original  # type: ignore[method-assign]
    assert embedder.embed(["a search still embeds"], "query").shape == (1, 384)


def test_a_search_reads_the_arms_and_the_entries_in_one_transaction(
    workspace: Workspace, service: MemoryService
) -> None:
    """In the daemon a search only reads: the ranking, the entries it answers and what is
    pending come from one read transaction on the index file (the rows attached), so
    they are of one state of both files; the rows' own connection is not asked."""
    service.search("coder", "tea")  # alone, it takes every row in first
    reader = MemoryService(workspace, Config.load(workspace.config_path), in_daemon=True)
    try:
        reader.search("coder", "warm up")
        on_index: list[str] = []
        on_rows: list[str] = []
        reader.shared.index_db.conn.set_trace_callback(on_index.append)
        reader.shared.db.conn.set_trace_callback(on_rows.append)
        found = reader.search("coder", "what does the user drink in the morning", limit=2)
        reader.shared.index_db.conn.set_trace_callback(None)
        reader.shared.db.conn.set_trace_callback(None)
    finally:
        reader.close()
    assert found.hits[0].entry.content == MEMORY[0]
    assert on_rows == []
    assert on_index[0] == "BEGIN" and on_index[-1] == "ROLLBACK"
    assert "BEGIN" not in on_index[1:-1]


def test_a_quick_search_by_meaning_runs_on_the_searching_thread_and_ranks_the_same(
    service: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The meaning arm goes to the searcher's helper thread while it has the query to
    embed or a long scan; a remembered query over a small agent is scored where the
    search runs (no thread hop). Either way the ranking is the same."""
    import oryxmem.index.vectors as vectors_module
    import oryxmem.search as search_module

    hopped: list[str] = []
    helper = search_module.own_helper

    def counting_helper() -> object:
        hopped.append(threading.current_thread().name)
        return helper()

    monkeypatch.setattr(search_module, "own_helper", counting_helper)
    queries = ("what beverage does she enjoy", "the CI", "dark mode at night")
    first = [contents(service.search("coder", q, limit=5).hits) for q in queries]
    assert len(hopped) == len(queries)  # each query embedded once, on the helper
    again = [contents(service.search("coder", q, limit=5).hits) for q in queries]
    assert len(hopped) == len(queries) and again == first  # remembered: here
    monkeypatch.setattr(vectors_module, "QUICK_ROWS", 0)  # every scan "long"
    assert [contents(service.search("coder", q, limit=5).hits) for q in queries] == first
    assert len(hopped) == 2 * len(queries)
    monkeypatch.setattr(vectors_module, "QUICK_ROWS", 4096)
    quick = vectors_module.Scorer(lambda query, limit: vectors_module._no_scores(0), rows=10)
    assert quick.quick(queries[0])
    assert not replace(quick, embeds=True).quick(queries[0])  # rows saved since the indexer
    assert not replace(quick, rows=4097).quick(queries[0])
