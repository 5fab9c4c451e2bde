"""The SQLite database ``.oryxos/oryxos.db``: opening it, and write transactions.

An open database is the sqlite3 connection in a small ``Database``: the statements
oryxmem runs need nothing more. sqlite-utils applies the schema's migrations
(schema.py), and is imported only when one is pending: it imports numpy, and a
command that saves one line should not wait for that.

The connections one process opens on one file take its write lock through one gate of
their own (``gate_of``), so a thread that must not be held up can wait for the process's
own writers and for another program's each as long as it chooses (``brief_wait``):
SQLite's busy timeout cannot tell them apart.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast

from oryxmem.errors import StorageError

# Executes and BUSY_TIMEOUT_MS are used by every reader of the database: named here too.
from oryxmem.store.dbfile import BUSY_TIMEOUT_MS as BUSY_TIMEOUT_MS
from oryxmem.store.dbfile import Executes as Executes
from oryxmem.store.dbfile import database_file, keep_private, use_wal


class Database:
    """An open database: its connection, and ``execute`` as sqlite-utils spells it."""

    def __init__(self, conn: sqlite3.Connection, gate: threading.Lock | None = None) -> None:
        self.conn = conn
        self._savepoints = 0
        # The process's gate to the file's write lock; how long a write transaction waits
        # at it, and then for another program's lock (seconds; brief_wait shortens both).
        self.gate = gate
        self.gate_wait = self.others_wait = BUSY_TIMEOUT_MS / 1000

    def execute(self, sql: str, parameters: Any = None) -> sqlite3.Cursor:
        if parameters is None:
            return self.conn.execute(sql)
        return self.conn.execute(sql, parameters)

    @contextmanager
    def atomic(self) -> Iterator[Database]:
        """A savepoint inside the transaction already open: all of it, or none."""
        self._savepoints += 1
        name = f"oryxmem_{self._savepoints}"
        self.conn.execute(f"SAVEPOINT {name}")
        try:
            yield self
        except BaseException:
            self.conn.execute(f"ROLLBACK TO {name}")
            self.conn.execute(f"RELEASE {name}")
            raise
        finally:
            self._savepoints -= 1
        self.conn.execute(f"RELEASE {name}")

    def close(self) -> None:
        self.conn.close()


# A plugin's migration set: its name, and its steps in order.
MigrationSet = tuple[str, Sequence[Callable[[Any], None]]]
# What a write that can be put off (brief_wait) waits for another program's lock, once
# the process's own writers are done: a save's thread never waits longer than this.
OTHERS_WAIT_MS = 10
_GATES: dict[str, threading.Lock] = {}  # database file -> its gate in this process
_GATES_LOCK = threading.Lock()


def gate_of(path: Path) -> threading.Lock:
    key = os.path.realpath(path)
    with _GATES_LOCK:
        return _GATES.setdefault(key, threading.Lock())


class OwnWritersBusy(sqlite3.OperationalError):
    """A write put off because this process's other threads held the write lock for
    longer than it would wait (is_locked says True: try again later)."""


def connect(path: Path, plugin_sets: Sequence[MigrationSet] = ()) -> Database:
    """Open (creating if needed) and migrate the database, WAL and synchronous=FULL;
    ``plugin_sets`` are the migrations of a plugin's own tables (a backend's), applied
    after oryxmem's by the same runner."""
    from oryxmem.store.schema import MIGRATIONS, SET_NAME, is_current

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        keep_private(path)
        conn = sqlite3.connect(
            str(path), isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000
        )
        db = Database(conn, gate_of(path))
        db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        use_wal(db)
        db.execute("PRAGMA synchronous = FULL")
        db.execute("PRAGMA foreign_keys = ON")
        db.execute("PRAGMA recursive_triggers = OFF")
        for name, steps in [(SET_NAME, MIGRATIONS), *plugin_sets]:
            if not is_current(conn, name, steps):
                migrate(conn, name, steps)
    except (sqlite3.Error, OSError) as error:
        raise StorageError(f"could not open the database {path}: {error}") from error
    return db


def migrate(conn: sqlite3.Connection, name: str, steps: Sequence[Callable[[Any], None]]) -> None:
    """Apply a migration set's pending steps with sqlite-utils, in one write transaction."""
    import sqlite_utils

    from oryxmem.store.schema import migration_set

    pending = migration_set(name, steps)
    db = sqlite_utils.Database(conn, recursive_triggers=False)
    with write_transaction(db):
        if pending.pending(db):  # asked again under the write lock: another may have won
            pending.apply(db)


ROWS_PER_INSERT = 100  # 100 rows of up to 9 columns: under SQLite's oldest limit of 999 values


def insert_values(db: Executes, head: str, rows: Sequence[Sequence[Any]]) -> None:
    """``head VALUES (...), (...), ...``: many rows, ROWS_PER_INSERT to a statement.

    executemany steps SQLite once per row, and the sqlite3 module lets go of the GIL
    around every step; in the daemon, whose event loop wants the GIL back at once,
    each of those is a hand-off between threads. One statement per hundred rows is
    one hand-off (and half the work in SQLite)."""
    if not rows:
        return
    marks = "(" + ", ".join("?" * len(rows[0])) + ")"
    for at in range(0, len(rows), ROWS_PER_INSERT):
        chunk = rows[at : at + ROWS_PER_INSERT]
        values = [value for row in chunk for value in row]
        db.execute(f"{head} VALUES {', '.join([marks] * len(chunk))}", values)


PARAMETERS_PER_QUERY = 500  # under SQLite's oldest limit on a statement's parameters


def select_in(
    db: Executes, sql: str, values: Sequence[Any], before: Sequence[Any] = ()
) -> list[Any]:
    """The rows of ``sql`` (whose ``{marks}`` is a list of placeholders) for every value,
    asked a few hundred at a time; ``before`` are the parameters ahead of the list."""
    rows: list[Any] = []
    for at in range(0, len(values), PARAMETERS_PER_QUERY):
        chunk = list(values[at : at + PARAMETERS_PER_QUERY])
        rows += db.execute(sql.format(marks=", ".join("?" * len(chunk))), [*before, *chunk])
    return rows


@contextmanager
def brief_wait(db: Database, ms: int) -> Iterator[Database]:
    """For writes that can be retried later, on a thread that must not be held up: wait
    at most ``ms`` for this process's other writers (their transactions are short), and
    at most OTHERS_WAIT_MS for another program's lock (it may hold it for minutes)."""
    db.gate_wait, db.others_wait = ms / 1000, min(ms, OTHERS_WAIT_MS) / 1000
    try:
        yield db
    finally:
        db.gate_wait = db.others_wait = BUSY_TIMEOUT_MS / 1000


def is_locked(error: BaseException) -> bool:
    """Did SQLite give up waiting for another connection's lock?"""
    return isinstance(error, sqlite3.OperationalError) and "locked" in str(error)


class Transacts(Protocol):
    """A database a write transaction can be opened on: ours, or sqlite-utils' own."""

    conn: sqlite3.Connection

    def atomic(self) -> contextlib.AbstractContextManager[Any]: ...


D = TypeVar("D", bound=Transacts)


@contextmanager
def write_transaction(db: D) -> Iterator[D]:
    """BEGIN IMMEDIATE ... COMMIT: the write lock is taken up front, never mid-way, and
    (for our Database) through the process's gate."""
    if db.conn.in_transaction:
        with db.atomic():
            yield db
        return
    gate = db.gate if isinstance(db, Database) else None
    if gate is None:
        db.conn.execute("BEGIN IMMEDIATE")
    else:
        _begin_through(gate, cast(Database, db))
    try:
        try:
            yield db
        except BaseException:
            if db.conn.in_transaction:
                db.conn.execute("ROLLBACK")
            raise
        db.conn.execute("COMMIT")
    finally:
        if gate is not None:
            gate.release()


@contextmanager
def unsynced_transaction(db: Database) -> Iterator[Database]:
    """write_transaction whose commit waits for no fsync (synchronous=NORMAL): the write
    lock is held that much less (another program's INSERT without a busy timeout meets
    it less). The caller makes the commit durable with sync_wal once the lock is let
    go: the WAL holds the commit whole."""
    if db.conn.in_transaction:  # part of a transaction open already: its commit decides
        with write_transaction(db):
            yield db
        return
    level = int(db.execute("PRAGMA synchronous").fetchone()[0])
    db.execute("PRAGMA synchronous = NORMAL")
    try:
        with write_transaction(db):
            yield db
    finally:
        db.execute(f"PRAGMA synchronous = {level}")


def sync_wal(db: Executes) -> None:
    """fdatasync the WAL of the connection's main database (none: nothing to sync), with
    no lock held: SQLite keeps none on the WAL, so opening and closing it here drops none
    (a database file's would)."""
    path = database_file(db)
    if not path:
        return
    try:
        fd = os.open(f"{path}-wal", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:  # checkpointed and gone: the database file was synced
        return
    try:
        os.fdatasync(fd)
    finally:
        os.close(fd)


@contextmanager
def read_snapshot(db: Database) -> Iterator[Database]:
    """BEGIN ... ROLLBACK around reads: one consistent view of the database that takes no
    write lock (in WAL, writers go on meanwhile); inside a transaction already open, its
    view. Nothing written inside is kept."""
    if db.conn.in_transaction:
        yield db
        return
    db.conn.execute("BEGIN")
    try:
        yield db
    finally:
        if db.conn.in_transaction:
            db.conn.execute("ROLLBACK")


def _begin_through(gate: threading.Lock, db: Database) -> None:
    """BEGIN IMMEDIATE holding the gate. Another program's lock is waited for with the
    gate let go (SQLite's busy handler would wait holding it, and hold up every thread
    of this process that only meant to wait for the others): tried again and again
    until ``db.others_wait`` is spent."""
    deadline = time.monotonic() + db.others_wait
    pause = 0.001
    while True:
        if not gate.acquire(timeout=db.gate_wait):
            raise OwnWritersBusy("database is locked by another thread of this process")
        try:
            db.conn.execute("PRAGMA busy_timeout = 0")
            try:
                db.conn.execute("BEGIN IMMEDIATE")
            finally:
                db.conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            return
        except sqlite3.OperationalError as error:
            gate.release()
            left = deadline - time.monotonic()
            if not is_locked(error) or left <= 0:
                raise
            time.sleep(min(pause, left))
            pause = min(pause * 2, 0.025)
        except BaseException:
            gate.release()
            raise
