"""Helpers for sync tests: outside clients, and the check that both sides agree."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from oryxmem.fileio import file_stat
from oryxmem.store import rows as stored_rows
from oryxmem.store.db import connect
from oryxmem.store.format import parse
from oryxmem.store.indexfile import index_path
from oryxmem.workspace import Workspace


def sql(workspace: Workspace, statement: str) -> str:
    """Run SQL with the sqlite3 shell: another program writing the table."""
    return sql_on(workspace.db_path, statement)


def index_sql(workspace: Workspace, statement: str) -> str:
    """Run SQL with the sqlite3 shell on the index file, the rows' file attached (as the
    index connection has it): what the derived indexes hold."""
    attach = f"ATTACH '{workspace.db_path}' AS rows"
    return sql_on(index_path(workspace.db_path), f"{attach}; {statement}")


def sql_on(path: Path, statement: str) -> str:
    """Run SQL with the sqlite3 shell on a database file."""
    done = subprocess.run(
        ["sqlite3", "-cmd", ".timeout 10000", str(path), statement],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout


@contextmanager
def write_lock_held(db_path: Path) -> Iterator[subprocess.Popen[str]]:
    """Another program (the sqlite3 shell) holding the database's write lock, taken for
    sure before the body runs, let go after it."""
    holder = subprocess.Popen(
        ["sqlite3", "-cmd", ".timeout 10000", str(db_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdin is not None and holder.stdout is not None
    holder.stdin.write("BEGIN EXCLUSIVE;\nSELECT 'held';\n")
    holder.stdin.flush()
    assert holder.stdout.readline().strip() == "held"
    try:
        yield holder
    finally:
        holder.stdin.write("COMMIT;\n.quit\n")
        holder.stdin.flush()
        holder.wait(timeout=30)


def file_items(workspace: Workspace, agent: str) -> Counter:
    path = workspace.memory_path(agent)
    if not path.exists():
        return Counter()
    doc = parse(path.read_text(encoding="utf-8"))
    assert doc.parseable, f"{path} does not parse: {doc.conflict_lines}"
    return Counter((e.scope, e.ts, e.content) for e in doc.all_entries())


def row_items(workspace: Workspace, agent: str) -> Counter:
    db = connect(workspace.db_path)
    try:
        rows = db.execute(
            "SELECT scope, ts, content FROM memory_entries WHERE agent = ?", [agent]
        ).fetchall()
    finally:
        db.close()
    return Counter(tuple(row) for row in rows)


def disagreements(workspace: Workspace) -> list[str]:
    """Every way the files and the table differ right now (empty: they agree)."""
    problems = []
    db = connect(workspace.db_path)
    try:
        agents = {row[0] for row in db.execute("SELECT DISTINCT agent FROM memory_entries")}
        integrity = db.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        db.close()
    if integrity != "ok":
        problems.append(f"integrity_check: {integrity}")
    agents |= {""} | {p.name for p in workspace.agents_dir.iterdir() if p.is_dir()}
    for agent in sorted(agents):
        try:
            in_file = file_items(workspace, agent)
        except AssertionError as error:
            problems.append(str(error))
            continue
        in_rows = row_items(workspace, agent)
        if in_file != in_rows:
            problems.append(
                f"{agent!r}: file-only {in_file - in_rows}, rows-only {in_rows - in_file}"
            )
    for tmp in workspace.os_dir.rglob("*.tmp"):
        problems.append(f"temp file left behind: {tmp}")
    return problems


def unsettled(workspace: Workspace) -> list[str]:
    """The agents whose MEMORY.md the daemon has not yet recorded as agreed as it is now
    (a reconcile in flight: the sides may already match while the agreed state lags)."""
    names = [""] + [p.name for p in workspace.agents_dir.iterdir() if p.is_dir()]
    db = connect(workspace.db_path)
    try:
        return [
            agent
            for agent in names
            if (stat := file_stat(workspace.memory_path(agent))) is not None
            and not stored_rows.is_settled(db, agent, stat)
        ]
    finally:
        db.close()


def wait_until(condition: Callable[[], bool], timeout: float = 20.0, step: float = 0.02) -> float:
    """Seconds it took; fails the test when the condition never held."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if condition():
            return time.monotonic() - started
        time.sleep(step)
    raise AssertionError(f"condition not met within {timeout} s")


@contextmanager
def cpu_load(processes: int | None = None) -> Iterator[None]:
    """A busy machine: processes that do nothing but spin (two per core by default, a
    load average of about 4 on 2 cores with the test's own work on top)."""
    count = processes if processes is not None else 2 * (os.cpu_count() or 1)
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def stale_editor(path: Path, stop: threading.Event, *, read_ahead: float, every: float) -> int:
    """An editor that saves MEMORY.md again and again from a buffer it read ``read_ahead``
    seconds before (by rename, as vim and VS Code save), every ``every`` seconds, until
    ``stop``: each save drops whatever was written meanwhile. Returns how many it wrote."""
    written = 0
    while not stop.wait(every):
        try:
            buffer = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            continue
        time.sleep(read_ahead)
        tmp = path.with_name(f".{path.name}.swp")
        tmp.write_text(buffer, encoding="utf-8")
        os.replace(tmp, path)
        written += 1
    return written


def git(cwd: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.org",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.org",
    }
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout


class Background(threading.Thread):
    """A thread whose failure fails the test that started it: join() re-raises it."""

    def __init__(self, target: Callable[..., object], *args: object) -> None:
        super().__init__(daemon=True)
        self._work = (target, args)
        self.error: BaseException | None = None

    def run(self) -> None:
        target, args = self._work
        try:
            target(*args)
        except BaseException as error:  # handed to the test thread by join()
            self.error = error

    def join(self, timeout: float | None = 120) -> None:
        super().join(timeout)
        if self.is_alive():
            raise AssertionError(f"{self._work[0].__name__} still runs after {timeout} s")
        if self.error is not None:
            raise self.error


def all_done(threads: list[Background], timeout: float = 120) -> None:
    """Start these threads, join them all (waiting up to ``timeout`` s for each), and
    re-raise the first failure."""
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)


def inotify_queue_limit() -> int:
    return int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())


def storm_of_events(folder: Path) -> None:
    """More file events in folder than the kernel's inotify queue holds (a create, a
    close and a delete per file, written as fast as Python can)."""
    where = str(folder)
    for n in range(inotify_queue_limit() // 2 + 1000):
        name = f"{where}/f{n}"
        os.close(os.open(name, os.O_CREAT | os.O_WRONLY, 0o600))
        os.unlink(name)


def watched_scratch_folder(workspace: Workspace, reconciles: Callable[[], int]) -> Path:
    """A folder the daemon watches that holds no agent's memory: agents/storm/scratch.

    Made in two steps, each waited for: creating a folder is news of the agent it
    sits in (a reconcile of 'storm'), and the watcher watches a new folder before it
    passes on the news, so once the second reconcile is counted, events inside are
    heard (and ignored: they are too deep to be memory)."""
    scratch = workspace.agents_dir / "storm" / "scratch"
    for folder in (scratch.parent, scratch):
        if not folder.exists():
            seen = quiet_count(reconciles)  # no retry still to come that would count here
            folder.mkdir()
            wait_until(lambda seen=seen: reconciles() > seen)
    return scratch


def quiet_count(count: Callable[[], int], quiet: float = 1.0) -> int:
    """The count once it has not moved for ``quiet`` seconds (longer than the watcher's
    retry of an agent it held back)."""
    deadline = time.monotonic() + 30
    while True:
        seen = count()
        time.sleep(quiet)
        if count() == seen:
            return seen
        assert time.monotonic() < deadline, "the count kept moving"
