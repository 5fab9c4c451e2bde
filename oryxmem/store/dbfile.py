"""A SQLite file as oryxmem keeps one: private whatever the umask, in WAL. Plain
sqlite3 only: the schema's migrations use it too (store/indexfile.py), and
store/db.py, which applies them, builds on it."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import time
from pathlib import Path
from typing import Any, Protocol

BUSY_TIMEOUT_MS = 10_000


class Executes(Protocol):
    """What reading needs of a connection: a sqlite3.Connection or a sqlite-utils Database."""

    def execute(self, sql: str, parameters: Any = ..., /) -> sqlite3.Cursor: ...


def keep_private(path: Path) -> None:
    """The database holds sessions and tool inputs: 0600 whatever the umask, and so its
    -wal and -shm files, which SQLite makes with the database file's mode. No file is
    opened here once it exists: closing any descriptor of a database file drops the
    POSIX locks of every connection this process has to it."""
    with contextlib.suppress(FileExistsError):  # made already: only its mode is seen to
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
    for name in (str(path), f"{path}-wal", f"{path}-shm"):
        try:
            info = os.lstat(name)
        except FileNotFoundError:
            continue
        if stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) != 0o600:
            os.chmod(name, 0o600)


def use_wal(db: Executes) -> None:
    """Switch to WAL once. The switch needs a moment alone with a new database file,
    and SQLite does not wait for that with busy_timeout: retry within it instead."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
        try:
            db.execute("PRAGMA journal_mode = WAL")
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def database_file(db: Executes) -> str:
    """The path of the connection's main database file ('' in memory)."""
    return database_files(db).get("main", "")


def database_files(db: Executes) -> dict[str, str]:
    """The path of each of the connection's database files by its schema name ('' for
    one in memory)."""
    return {str(name): str(path) for _, name, path in db.execute("PRAGMA database_list")}
