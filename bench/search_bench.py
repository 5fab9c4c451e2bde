"""Search benchmark (issue 11): hybrid search at 100,000 entries, indexing, saves meanwhile.

Everything goes through the daemon, a real process on a real socket:

- hybrid search p50 / p99 at --search-entries archival entries, the query's embedding
  included. The entries are 6 to 16 words drawn by Zipf's law from 20,000 word
  types (the most frequent 380 real English words, the rest made up), about the
  vocabulary 100,000 memories of English hold; queries are 2 to 6 words drawn
  the same way. Their vectors are written straight into the index as random
  unit vectors (a search costs the same whatever they point at, and embedding
  100,000 entries would take minutes each run); the queries are embedded;
- the daemon's RSS with the model loaded and that agent's vectors in memory;
- indexing: entries/s the indexer thread embeds, from a backlog of --search-backlog
  entries, and one client's save p50 / p99 while it does;
- one client saving back to back, the vectors following (the indexer waits for the
  stream to end): save p50 / p99, and how soon after it the vectors have every save;
- the daemon's CPU once it is idle again;
- in one process, the words indexes taking in --take-in entries of one agent written at
  one time, and the same entries written an hour apart (a memory kept over months,
  restored or pulled: most entries have nothing written within BM25's context span
  before them), measured against the first.

Run: python -m bench.search_bench [--search-entries 100000] [--search-backlog 3000] [--json]
"""

from __future__ import annotations

import argparse
import itertools
import random
import sqlite3
import statistics
import threading
import time
from collections.abc import Sequence
from contextlib import closing
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import numpy.typing as npt

from bench.common import (
    Figure,
    at_least,
    at_most,
    below,
    cpu_seconds,
    daemon_on_socket,
    percentile,
    run_alone,
    scratch_workspace,
    stop,
)
from oryxmem.client import Client
from oryxmem.config import Config, set_value
from oryxmem.index import IndexState, read_index_state, write_index_state
from oryxmem.index.vectors import text_key
from oryxmem.service import MemoryService
from oryxmem.store.db import insert_values, write_transaction
from oryxmem.store.format import ARCHIVAL, NewEntry, numbered, render_entry_line
from oryxmem.store.rows import insert_rows
from oryxmem.workspace import Workspace

TS = "2026-11-30 10:00:00"
# Words in English's order of frequency (after the stopwords): drawn with Zipf's law.
VOCABULARY = """
time year people way day man thing woman life child world school state family student
group country problem hand part place case week company system program question work
government number night point home water room mother area money story fact month lot
right study book eye job word business issue side kind head house service friend father
power hour game line end member law car city community name president team minute idea
kid body information back parent face others level office door health person art war
history party result change morning reason research girl guy moment air teacher force
education foot boy age policy music market sense nation plan college interest death
experience effect class control care field development role effort rate heart drug show
leader light voice wife police mind price report decision son view relationship town
road arm difference value building action model season society tax director position
player record paper space ground form event official matter center couple site project
activity star table need court oil situation cost industry figure street image phone
data picture practice piece land product doctor wall patient worker news test movie
north love support technology step baby computer type attention film tree source
organization hair window evidence population site river deploy release server database
branch commit review merge test build pipeline config token cache query index migration
deadline meeting sprint ticket bug feature design schema endpoint client library module
""".split()  # noqa: SIM905 (words read best as words)


WORD_TYPES = 20_000  # about what 100,000 memories of English text hold
SYLLABLES = (  # 20 of them make 168,400 words of 2 to 4 syllables
    "ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "pe", "da",
    "ri", "ko", "lu", "me", "na", "so", "ta", "vi", "po", "de",
)  # fmt: skip


def vocabulary(types: int = WORD_TYPES) -> list[str]:
    """The real words first (the most frequent), then made-up ones for the long tail."""
    rng = random.Random(3)
    words = list(dict.fromkeys(VOCABULARY))
    seen = set(words)
    while len(words) < types:
        word = "".join(rng.choices(SYLLABLES, k=rng.randint(2, 4)))
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


_WORDS = vocabulary()
_ZIPF = [1 / (rank + 1) for rank in range(len(_WORDS))]  # Zipf's law, exponent 1
# Summed once: random.choices would sum 20,000 weights again for every sentence.
_ZIPF_SUMS = list(itertools.accumulate(_ZIPF))


def zipf_words(rng: random.Random, count: int) -> list[str]:
    return rng.choices(_WORDS, cum_weights=_ZIPF_SUMS, k=count)


def sentences(count: int, seed: int = 7, words: list[str] | None = None) -> list[str]:
    """Entries of 6 to 16 words by Zipf's law (of the 20,000 types, or of these words)."""
    rng = random.Random(seed)
    if words is None:
        return [f"{' '.join(zipf_words(rng, rng.randint(6, 16)))} ({i})" for i in range(count)]
    sums = _ZIPF_SUMS[: len(words)]
    return [
        f"{' '.join(rng.choices(words, cum_weights=sums, k=rng.randint(6, 16)))} ({i})"
        for i in range(count)
    ]


def seed(workspace: Workspace, agents: dict[str, list[str]]) -> None:
    """Each agent's file, its rows and indexes (sync), and a random unit vector per entry."""
    service = MemoryService(workspace, Config.load(workspace.config_path))
    db = service.db
    for agent, texts in agents.items():
        path = workspace.memory_path(agent)
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = ["## 核心记忆", "", "## 归档记忆", *(render_entry_line(TS, t) for t in texts)]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        with write_transaction(db):
            insert_rows(db, agent, numbered(NewEntry(ARCHIVAL, TS, t) for t in texts), "bench")
    service.sync()  # the keyword indexes follow
    vectors = service.vector_index()
    assert vectors is not None
    rng = np.random.default_rng(7)
    db = service.index_db  # the vectors' file, the rows attached
    with write_transaction(db):
        vectors.drop(db)
        vectors.create(db)
        rows = db.execute("SELECT id, agent, content FROM memory_entries").fetchall()
        keys = [text_key(content) for _, _, content in rows]
        matrix = rng.standard_normal((len(rows), 384)).astype(np.float32)
        matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
        insert_values(
            db,
            "INSERT OR IGNORE INTO memory_vectors(key, vector)",
            [(key, v.astype(np.float16).tobytes()) for key, v in zip(keys, matrix, strict=True)],
        )
        insert_values(
            db,
            "INSERT INTO memory_vector_rows(row_id, agent, key, step)",
            [(row_id, agent, key, 1) for (row_id, agent, _), key in zip(rows, keys, strict=True)],
        )
        latest = db.execute("SELECT coalesce(max(seq), 0) FROM memory_changes").fetchone()[0]
        write_index_state(db, vectors, IndexState(vectors.identity(), int(latest), 0))
    assert read_index_state(db, vectors) is not None
    service.close()


def seed_sessions(workspace: Workspace, agent: str, count: int, rounds_each: int = 10) -> None:
    """``count`` sessions of the agent, each of ``rounds_each`` rounds (a question and its
    answer, sentences as the entries are made), taken into the episode index with random
    unit vectors in place of the model's (as seed() does for the entries)."""
    from oryxmem.index.episodes import EpisodeIndex
    from oryxmem.store.sessions import dump_messages

    service = MemoryService(workspace, Config.load(workspace.config_path))
    db = service.db
    texts = iter(sentences(count * rounds_each * 2, seed=12))
    rows = []
    for number in range(count):
        messages = [
            {"role": role, "content": next(texts), "at": TS}
            for _ in range(rounds_each)
            for role in ("user", "assistant")
        ]
        rows.append((f"bench-{number:05d}", agent, TS, TS, dump_messages(messages)))
    with write_transaction(db):
        insert_values(
            db, "INSERT INTO sessions(id, agent, created_at, updated_at, messages_json)", rows
        )
    rng = np.random.default_rng(13)

    def random_vectors(batch: Sequence[str]) -> npt.NDArray[np.float32]:
        matrix = rng.standard_normal((len(batch), 384)).astype(np.float32)
        unit: npt.NDArray[np.float32] = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
        return unit

    vectors = service.vector_index()
    assert vectors is not None
    index = EpisodeIndex(random_vectors, None, vectors.embedder.model_id)
    while index.catch_up(service.index_db, 200):
        pass
    service.close()


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def pending_vectors(client: Client) -> int:
    return int(client.health()["indexes"]["vectors"]["pending"] or 0)


def run(args: argparse.Namespace) -> list[Figure]:
    figures: list[Figure] = []
    with scratch_workspace("oryxmem-search-") as root:
        workspace = Workspace(root)
        seed(
            workspace,
            {
                "big": sentences(args.search_entries),
                "mid": sentences(args.search_entries // 10, seed=8),
            },
        )
        seed_sessions(workspace, "big", args.sessions)
        proc, sock = daemon_on_socket(root, "search")
        try:
            client = Client(sock)
            rng = random.Random(11)
            queries = [" ".join(zipf_words(rng, rng.randint(2, 6))) for _ in range(220)]
            client.search("mid", "warm up the model and the matrix", 10)
            rss_mid = rss_mb(proc.pid)
            client.search("big", "warm up the model and the matrix", 10)
            times = []
            for query in queries[20:]:
                started = time.perf_counter()
                client.search("big", query, 10)
                times.append((time.perf_counter() - started) * 1000)
            label = f"hybrid search p50 at {args.search_entries} entries"
            figures += [
                Figure(label, statistics.median(times), "ms", at_most(15, 11, "ms")),
                Figure(
                    f"hybrid search p99 at {args.search_entries} entries",
                    percentile(times, 0.99),
                    "ms",
                ),
                Figure(
                    f"daemon RSS, model loaded, {args.search_entries // 10} entries",
                    rss_mid,
                    "MB",
                    at_most(250, 11, "MB"),
                ),
                Figure(f"  and {args.search_entries} entries more", rss_mb(proc.pid), "MB"),
            ]
            # The whole prompt (issue 12), with the question as its query and without one.
            prompts, plain, contexts = [], [], []
            for query in queries[20:120]:
                started = time.perf_counter()
                client.prompt("big", query=query)
                prompts.append((time.perf_counter() - started) * 1000)
                started = time.perf_counter()
                client.prompt("big")
                plain.append((time.perf_counter() - started) * 1000)
                started = time.perf_counter()
                client.context("big")
                contexts.append((time.perf_counter() - started) * 1000)
            where = f"{args.search_entries} entries, {args.sessions} sessions"
            figures += [
                Figure(
                    f"prompt with a query p50, {where}",
                    statistics.median(prompts),
                    "ms",
                    at_most(25, 12, "ms"),
                ),
                Figure("  its p99", percentile(prompts, 0.99), "ms"),
                Figure(
                    "prompt without a query p50",
                    statistics.median(plain),
                    "ms",
                    at_most(2, 12, "ms"),
                ),
                Figure("  the memory block alone (context) p50", statistics.median(contexts), "ms"),
            ]
            # A backlog to embed: an agent written behind the daemon's back, as git would,
            # while an agent asks it a question every 100 ms and another client saves.
            figures += backfill(client, workspace, args.search_backlog, rng)
            figures += stream_of_saves(client, args.stream_saves)
            client.close()
            time.sleep(2)
            before, at = cpu_seconds(proc.pid), time.monotonic()
            time.sleep(args.search_idle)
            cpu = (cpu_seconds(proc.pid) - before) / (time.monotonic() - at) * 100
            figures.append(
                Figure(
                    f"idle daemon CPU over {args.search_idle:.0f} s, model loaded",
                    cpu,
                    "%",
                    below(1, 11, "%"),
                )
            )
        finally:
            stop(proc)
            sock.unlink(missing_ok=True)
    figures += words_take_in(args.take_in)
    return figures


def words_take_in(count: int) -> list[Figure]:
    """The words indexes (keyword, BM25) taking in ``count`` rows of one agent, in one
    process: the entries written at one time, then an hour apart."""
    rates = {}
    texts = sentences(count, seed=12)
    for gap in (timedelta(0), timedelta(hours=1)):
        with scratch_workspace("oryxmem-take-in-") as root:
            workspace = Workspace(root)
            set_value(workspace.config_path, "recall.embedder", "none")
            service = MemoryService(workspace, Config.load(workspace.config_path))
            try:
                start = datetime(2025, 1, 1)
                entries = (
                    NewEntry(ARCHIVAL, (start + gap * n).strftime("%Y-%m-%d %H:%M:%S"), text)
                    for n, text in enumerate(texts)
                )
                with write_transaction(service.db):
                    insert_rows(service.db, "restored", numbered(entries), "bench")
                began = time.perf_counter()
                service.upkeep.catch_up_indexes()
                rates[gap] = count / (time.perf_counter() - began)
            finally:
                service.close()
    at_once, apart = rates[timedelta(0)], rates[timedelta(hours=1)]
    return [
        Figure(f"words take-in of {count} entries written at one time", at_once, "/s"),
        Figure("  the same entries written an hour apart", apart, "/s"),
        Figure("  an hour apart / at one time", apart / at_once, "x", at_least(0.5, 21, "x")),
    ]


def words_pending(client: Client) -> int:
    indexes = client.health()["indexes"]
    return sum(int(indexes[name]["pending"] or 0) for name in ("keyword", "bm25"))


@dataclass
class Asking:
    """Searches of one agent every 100 ms in a thread, until stopped."""

    client: Client
    agent: str
    queries: list[str]
    times: list[float] = field(default_factory=list)
    partial: int = 0  # answers that said some rows were not embedded yet
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        for query in itertools.cycle(self.queries):
            if self.stop.wait(0.1):
                return
            started = time.perf_counter()
            found = self.client.search(self.agent, query, 10)
            self.times.append((time.perf_counter() - started) * 1000)
            self.partial += bool(found.get("unembedded"))


def backfill(client: Client, workspace: Workspace, count: int, rng: random.Random) -> list[Figure]:
    """``count`` entries written into a new agent's MEMORY.md at once: how fast the words
    and then the vectors take them in while that agent is searched every 100 ms, and the
    searches and one client's saves meanwhile."""
    path = workspace.memory_path("backlog")
    path.parent.mkdir(parents=True, exist_ok=True)
    # English words: made-up ones would take the model several tokens each.
    news = sentences(count, seed=9, words=list(dict.fromkeys(VOCABULARY)))
    path.write_text(
        "\n".join(["## 归档记忆", *(render_entry_line(TS, t) for t in news)]) + "\n",
        encoding="utf-8",
    )
    started = time.monotonic()
    queries = [" ".join(rng.choices(VOCABULARY[:200], k=rng.randint(2, 5))) for _ in range(50)]
    asking = Asking(Client(client.socket_path), "backlog", queries)
    thread = threading.Thread(target=asking.run, daemon=True)
    thread.start()
    try:
        words_at = vectors_at = None
        saves: list[float] = []
        while vectors_at is None and time.monotonic() - started < 600:
            if len(saves) < 300:
                begun = time.perf_counter()
                client.save("solo", f"saved during the backfill {len(saves)}")
                saves.append((time.perf_counter() - begun) * 1000)
            else:
                time.sleep(0.05)
            if len(saves) % 10:
                continue
            if words_at is None and words_have(client, workspace, "backlog", count):
                words_at = time.monotonic() - started
            if words_at is not None and pending_vectors(client) == 0:
                vectors_at = time.monotonic() - started
    finally:
        asking.stop.set()
        thread.join(timeout=60)
    if words_at is None or vectors_at is None:
        raise RuntimeError("the backfill did not finish in 600 s")
    return [
        Figure(f"backfill of {count}: the words arm has them after", words_at, "s"),
        Figure(
            "  indexing, entries/s, searched every 100 ms (2 cores)",
            (count + len(saves)) / vectors_at,
            "/s",
            at_least(300, 21, "/s"),
        ),
        Figure(
            "  search p50 during the backfill",
            statistics.median(asking.times),
            "ms",
            at_most(30, 21, "ms"),
        ),
        Figure("  search p99 during the backfill", percentile(asking.times, 0.99), "ms"),
        Figure("  searches that said rows were pending", asking.partial, ""),
        Figure(
            "  save p50 during the backfill", statistics.median(saves), "ms", at_most(1.5, 11, "ms")
        ),
        Figure("  save p99 during the backfill", percentile(saves, 0.99), "ms"),
    ]


def stream_of_saves(client: Client, count: int) -> list[Figure]:
    """``count`` saves back to back from one client with the default embedder on: what
    embedding the new rows beside them costs them, and when the vectors have them all."""
    while pending_vectors(client):
        time.sleep(0.05)
    times = []
    for n in range(count):
        begun = time.perf_counter()
        client.save("stream", f"a note saved in a stream, number {n}, about the garden")
        times.append((time.perf_counter() - begun) * 1000)
    ended = time.monotonic()
    while pending_vectors(client):
        time.sleep(0.01)
    return [
        Figure(f"{count} saves back to back, vectors on: save p50", statistics.median(times), "ms"),
        Figure("  save p99", percentile(times, 0.99), "ms"),
        Figure("  the vectors have them all after the last", time.monotonic() - ended, "s"),
    ]


def words_have(client: Client, workspace: Workspace, agent: str, count: int) -> bool:
    """Are the agent's rows in (read straight from the table, as another program would),
    and have the keyword and BM25 indexes taken every row in?"""
    with closing(sqlite3.connect(f"{workspace.db_path.as_uri()}?mode=ro", uri=True)) as conn:
        found = conn.execute("SELECT count(*) FROM memory_entries WHERE agent = ?", [agent])
        if int(found.fetchone()[0]) < count:
            return False
    return words_pending(client) == 0


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--search-entries", type=int, default=100_000, help="entries searched")
    parser.add_argument("--sessions", type=int, default=1000, help="sessions of the agent")
    parser.add_argument("--search-backlog", type=int, default=3000, help="entries to embed")
    parser.add_argument(
        "--stream-saves", type=int, default=2000, help="saves back to back, vectors on"
    )
    parser.add_argument(
        "--search-idle", type=float, default=20, help="seconds of idle CPU measured"
    )
    parser.add_argument(
        "--take-in", type=int, default=20_000, help="entries the words indexes take in"
    )


def main(argv: list[str] | None = None) -> list[Figure]:
    return run_alone("search benchmark", __doc__, options, run, argv)


if __name__ == "__main__":
    main()
