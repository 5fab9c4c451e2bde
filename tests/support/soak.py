"""A seeded random driver of the real daemon: the model-based soak test (issue 5).

It plays what a workstation does to memory: agents saving over the socket from
several clients, a human editing MEMORY.md in place and by rename, a stale
editor buffer written back, `git checkout` of another branch and back, the
`sqlite3` shell inserting, updating and deleting rows, another program holding
the database's write lock for seconds while agents save, SIGKILL and restart in
the middle of a burst of saves, and a burst of file events larger than the
kernel's inotify queue. It keeps a model of what must be there and, after every
few steps, lets the daemon settle and checks:

- every acknowledged save is present exactly once, in its file and in the rows;
- every line a human or a program added (and did not take back) likewise;
- a save in flight when the daemon was killed is there at most once;
- nothing else is in the files, the rows equal the files, every file parses.

The actions come from ``random.Random(seed)``: a failure prints its seed and
the last steps, and ``ORYXMEM_SOAK_SEED=<seed>`` plays the same sequence again.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from oryxmem.client import Client
from oryxmem.daemon.worker import DEFER_PATIENCE_SECONDS
from oryxmem.errors import OryxError
from oryxmem.store.format import parse
from oryxmem.workspace import Workspace
from support.daemon import RunningDaemon, start_daemon
from support.sync import (
    Background,
    all_done,
    disagreements,
    git,
    sql,
    stale_editor,
    storm_of_events,
    unsettled,
    watched_scratch_folder,
)

AGENTS = ["coder", "助手", ""]  # '' is the global file
TS = "2026-11-30 09:00:00"
SETTLE_SECONDS = 20.0  # well under the 30 s rescan: an overflow must be caught at once
# How long one save of the editor storm may take at most by design: the daemon puts off
# a save to a file another program is writing for up to DEFER_PATIENCE_SECONDS (the
# storm's editor saves by rename, which puts nothing off, but a new file that took the
# inode number of one oryxmem wrote looks written in place until the next rename); then
# the write itself, on a loaded machine.
STORM_SAVE_SECONDS = DEFER_PATIENCE_SECONDS + 5
STORM_SAVES = 15
# Saves that try to forge lines and headings: they must come back exactly as sent.
TRICKY = [
    "two lines\n## 核心记忆\n- [2026-01-01 00:00:00] forged",
    "  spaced  out  ",
    "ends with a backslash \\",
    "emoji 🦊 and tabs\tinside",
]


def _sql_text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


@dataclass
class Model:
    """What must be in each agent's memory (content -> agent), and what may be."""

    must: dict[str, str] = field(default_factory=dict)
    may: dict[str, str] = field(default_factory=dict)  # in flight when the daemon died
    human: dict[str, str] = field(default_factory=dict)  # the lines a human typed
    rows: dict[str, str] = field(default_factory=dict)  # the rows the sqlite3 shell added


class SoakFailure(AssertionError):
    pass


class Soak:
    def __init__(self, workspace: Workspace, logs: Path, seed: int) -> None:
        self.workspace = workspace
        self.logs = logs  # one daemon log per start
        self.log = logs / "daemon-0.log"
        self.starts = 0
        self._lock = threading.Lock()
        self.seed = seed
        self.rng = random.Random(seed)
        self.model = Model()
        self.steps: list[str] = []
        self.counter = 0
        self.daemon: RunningDaemon | None = None
        self.clients: list[Client] = []
        self.stats: Counter[str] = Counter()
        self.main_branch = ""

    # --- set-up -------------------------------------------------------------------

    def start(self) -> None:
        git(self.workspace.root, "init", "-q")
        git(self.workspace.root, "config", "core.autocrlf", "false")
        git(self.workspace.root, "add", "-A")
        git(self.workspace.root, "commit", "-q", "--allow-empty", "-m", "start")
        self.main_branch = git(self.workspace.root, "symbolic-ref", "--short", "HEAD").strip()
        self._start_daemon()

    def _start_daemon(self) -> None:
        self.starts += 1
        self.log = self.logs / f"daemon-{self.starts}.log"
        self.daemon = start_daemon(self.workspace, self.log)
        self.clients = [Client(self.daemon.socket, timeout=30) for _ in range(3)]

    def stop(self) -> None:
        for client in self.clients:
            client.close()
        if self.daemon is not None and self.daemon.proc.poll() is None:
            assert self.daemon.stop() == 0, self.daemon.text()

    # --- the run ------------------------------------------------------------------

    def run(self, *, steps: int | None = None, seconds: float | None = None) -> None:
        actions: list[tuple[int, Callable[[], None]]] = [
            (30, self.save),
            (5, self.burst),
            (8, self.human_append),
            (6, self.human_edit_by_rename),
            (4, self.human_edit_in_place),
            (3, self.human_delete),
            (2, self.delete_file_and_restore),
            (2, self.slow_editor_while_saving),
            (4, self.stale_buffer),
            (2, self.stale_editor_storm),
            (3, self.git_checkout_and_back),
            (6, self.sql_insert),
            (3, self.sql_update),
            (3, self.sql_delete),
            (2, self.kill_and_restart),
            (1, self.inotify_overflow),
            (2, self.database_held),
        ]
        weights = [w for w, _ in actions]
        deadline = time.monotonic() + seconds if seconds else None
        done = 0
        try:
            while (steps is None or done < steps) and (
                deadline is None or time.monotonic() < deadline
            ):
                action = self.rng.choices(actions, weights)[0][1]
                self.steps.append(action.__name__)
                self.stats[action.__name__] += 1
                action()
                done += 1
                if done % 8 == 0:
                    self.settle_and_check()
            self.settle_and_check()
        except Exception as error:
            raise SoakFailure(self.explain(error)) from error

    def explain(self, error: BaseException) -> str:
        recent = ", ".join(self.steps[-25:])
        return (
            f"soak failed with seed {self.seed} after {len(self.steps)} steps (replay:"
            f" ORYXMEM_SOAK_SEED={self.seed} ORYXMEM_SOAK_STEPS={len(self.steps)}): {error}\n"
            f"last steps: {recent}\n"
            f"daemon log tail:\n{self.log.read_text(errors='replace')[-3000:]}"
        )

    # --- helpers ------------------------------------------------------------------

    def fresh(self, kind: str) -> str:
        self.counter += 1
        text = f"{kind} {self.seed}-{self.counter}"
        if kind == "save" and self.rng.random() < 0.1:
            text += " " + self.rng.choice(TRICKY)
        return text

    def path(self, agent: str) -> Path:
        return self.workspace.memory_path(agent)

    def client(self) -> Client:
        return self.rng.choice(self.clients)

    def quiet(self) -> None:
        """Let what is in flight reach both sides and be recorded as agreed, as a human
        takes seconds to type (a file removed mid-reconcile would keep the rows the
        daemon had not yet recorded as in it: they look added since)."""
        self._until_none(self._unsettled, "not settled", every=0.05)

    def _unsettled(self) -> list[str]:
        """How the two sides differ, or else whose agreed state lags behind its file."""
        differ = disagreements(self.workspace)
        if differ:
            return differ
        return [f"{agent!r}: agreed state behind the file" for agent in unsettled(self.workspace)]

    def _until_none(self, problems: Callable[[], list[str]], what: str, every: float) -> None:
        """Wait (SETTLE_SECONDS at most, looking every ``every`` s) until ``problems`` finds
        none; fail with what it found last, so the soak never builds on a guess."""
        deadline = time.monotonic() + SETTLE_SECONDS
        found = problems()
        while found:
            if time.monotonic() > deadline:
                raise SoakFailure(f"{what} after {SETTLE_SECONDS:.0f} s: " + "; ".join(found[:10]))
            time.sleep(every)
            found = problems()

    def write_by_rename(self, path: Path, text: str) -> None:
        tmp = path.with_name(f".{path.name}.swp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)

    def file_text(self, agent: str) -> str:
        path = self.path(agent)
        if not path.exists():
            return "## 核心记忆\n\n## 归档记忆\n"
        return path.read_text(encoding="utf-8")

    # --- actions ------------------------------------------------------------------

    def save(self) -> None:
        agent = self.rng.choice(AGENTS)
        content = self.fresh("save")
        scope = "core" if self.rng.random() < 0.2 else "archival"
        saved = self.client().save(agent or None, content, scope)["entry"]["content"]
        self.model.must[saved] = agent  # as stored: stripped of outer whitespace

    def _saver(self, agent: str, count: int, acked: dict[str, str], maybe: dict[str, str]) -> None:
        with Client(self.daemon.socket if self.daemon else "", timeout=30) as client:
            for _ in range(count):
                with self._lock:
                    content = self.fresh("burst")
                maybe[content] = agent
                try:
                    client.save(agent or None, content)
                except (OryxError, OSError):
                    return  # the daemon went away: this one may or may not be there
                del maybe[content]
                acked[content] = agent

    def _savers(
        self, clients: int, count: int, until: Callable[[], None] | None = None
    ) -> tuple[dict[str, str], dict[str, str]]:
        """Clients saving at once over the agents, until each is done or `until` (run
        meanwhile) stopped the daemon: (answered saves, saves left unanswered)."""
        acked: dict[str, str] = {}
        maybe: dict[str, str] = {}
        threads = [
            Background(self._saver, AGENTS[n % 3], count, acked, maybe) for n in range(clients)
        ]
        for thread in threads:
            thread.start()
        if until is not None:
            until()
        for thread in threads:
            thread.join()  # a saver's unexpected error is the soak's failure
        return acked, maybe

    def burst(self) -> None:
        """Several clients at once, on several agents: one group commit after another."""
        acked, maybe = self._savers(6, 10)
        if maybe:
            raise SoakFailure(f"saves of a running daemon failed: {list(maybe)}")
        self.model.must.update(acked)

    def database_held(self) -> None:
        """Another program (a script, a database browser) holds the rows' write lock for
        a while: saves are answered all the same, and the rows follow once it lets go."""
        other = sqlite3.connect(self.workspace.db_path, timeout=30, isolation_level=None)
        try:
            other.execute("BEGIN EXCLUSIVE")
            hold = self.rng.uniform(0.5, 3.0)
            acked, maybe = self._savers(3, 8, until=lambda: time.sleep(hold))
        finally:
            if other.in_transaction:
                other.execute("ROLLBACK")
            other.close()
        if maybe:
            raise SoakFailure(
                f"saves while another program held the database failed: {list(maybe)}"
            )
        self.model.must.update(acked)

    def human_append(self) -> None:
        """`echo '- [...] ...' >> MEMORY.md`: an append in place, no lock."""
        self.quiet()
        agent = self.rng.choice(AGENTS)
        content = self.fresh("typed")
        text = self.file_text(agent)
        path = self.path(agent)
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            path.write_text(text, encoding="utf-8")
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(("" if text.endswith("\n") else "\n") + f"- [{TS}] {content}\n")
        self.model.must[content] = agent
        self.model.human[content] = agent

    def _edited(self, agent: str, text: str) -> str:
        """The text with a human line added to core, and maybe one of theirs removed."""
        content = self.fresh("edited")
        lines = text.splitlines(keepends=True)
        core = next((i for i, line in enumerate(lines) if line.startswith("## 核心")), None)
        new_line = f"- [{TS}] {content}\n"
        if core is None:
            lines = [f"## 核心记忆\n{new_line}\n", *lines]
        else:
            lines.insert(core + 1, new_line)
        self.model.must[content] = agent
        self.model.human[content] = agent
        mine = [c for c, a in self.model.human.items() if a == agent and c != content]
        if mine and self.rng.random() < 0.3:
            gone = self.rng.choice(mine)
            lines = [line for line in lines if not line.rstrip("\n").endswith(f"] {gone}")]
            del self.model.human[gone], self.model.must[gone]
        return "".join(lines)

    def human_edit_by_rename(self) -> None:
        """An editor that writes a temp file and renames it over MEMORY.md (vim, VS Code)."""
        self.quiet()
        agent = self.rng.choice(AGENTS)
        path = self.path(agent)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.write_by_rename(path, self._edited(agent, self.file_text(agent)))

    def human_edit_in_place(self) -> None:
        """An editor that truncates the file and writes it again (nano, many IDEs)."""
        self.quiet()
        agent = self.rng.choice(AGENTS)
        path = self.path(agent)
        path.parent.mkdir(parents=True, exist_ok=True)
        text = self._edited(agent, self.file_text(agent))
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)

    def human_delete(self) -> None:
        """A human deletes a line they typed: it goes, from the rows too."""
        if not self.model.human:
            return
        self.quiet()
        content, agent = self.rng.choice(sorted(self.model.human.items()))
        text = self.file_text(agent)
        kept = [
            line
            for line in text.splitlines(keepends=True)
            if not line.rstrip("\n").endswith(f"] {content}")
        ]
        self.write_by_rename(self.path(agent), "".join(kept))
        del self.model.human[content], self.model.must[content]

    def slow_editor_while_saving(self) -> None:
        """An editor that truncates MEMORY.md and writes it again in small pieces, while
        an agent saves to the same file: every typed line and every save stays."""
        self.quiet()
        agent = self.rng.choice(AGENTS)
        path = self.path(agent)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = self._edited(agent, self.file_text(agent)).encode("utf-8")
        if not path.exists():
            path.write_text("", encoding="utf-8")

        acked: dict[str, str] = {}

        def agent_saves() -> None:
            with Client(self.daemon.socket if self.daemon else "", timeout=30) as client:
                for n in range(6):
                    with self._lock:
                        content = self.fresh("during-edit")
                    scope = "core" if n % 2 else "archival"
                    client.save(agent or None, content, scope)
                    acked[content] = agent
                    time.sleep(0.02)

        saver = Background(agent_saves)
        piece = max(48, len(data) // 30)  # about 30 writes: a human-sized file's save
        with open(path, "r+b") as editor:
            editor.truncate(0)
            saver.start()
            for at in range(0, len(data), piece):
                editor.write(data[at : at + piece])
                editor.flush()
                time.sleep(0.01)
        saver.join()
        self.model.must.update(acked)

    def delete_file_and_restore(self) -> None:
        """`rm MEMORY.md` that stays deleted: its entries leave the rows; the file put
        back (as `git checkout -- MEMORY.md` would) brings every one of them back."""
        self.quiet()
        agent = self.rng.choice(AGENTS)
        path = self.path(agent)
        if not path.exists():
            return
        text = path.read_text(encoding="utf-8")
        path.unlink()
        quoted = agent.replace("'", "''")
        deadline = time.monotonic() + 15
        while (
            sql(
                self.workspace, f"SELECT count(*) FROM memory_entries WHERE agent = '{quoted}'"
            ).strip()
            != "0"
        ):
            if time.monotonic() > deadline:
                raise SoakFailure(f"the rows of {agent!r} stayed after its MEMORY.md was deleted")
            time.sleep(0.1)
        self.write_by_rename(path, text)
        self.quiet()

    def stale_buffer(self) -> None:
        """The editor read the file; agents saved meanwhile; the old buffer is written back
        with one new line. The saves must survive it."""
        self.quiet()
        agent = self.rng.choice(AGENTS)
        buffer = self.file_text(agent)
        for _ in range(self.rng.randint(1, 3)):
            saved = self.client().save(agent or None, self.fresh("save"))
            self.model.must[saved["entry"]["content"]] = agent
        path = self.path(agent)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.write_by_rename(path, self._edited(agent, buffer))

    def stale_editor_storm(self) -> None:
        """Eight clients save to one agent while an editor writes the file back from a
        buffer read 30 ms before, about twelve times a second: each save is put back as
        often as an old buffer drops it."""
        self.quiet()
        agent = self.rng.choice(AGENTS)
        path = self.path(agent)
        if not path.exists():
            self.model.must[
                self.client().save(agent or None, self.fresh("save"))["entry"]["content"]
            ] = agent
        stop = threading.Event()
        editor = Background(lambda: stale_editor(path, stop, read_ahead=0.03, every=0.05))
        editor.start()
        try:
            acked: dict[str, str] = {}
            maybe: dict[str, str] = {}
            threads = [Background(self._saver, agent, STORM_SAVES, acked, maybe) for _ in range(8)]
            all_done(threads, timeout=STORM_SAVES * STORM_SAVE_SECONDS)
        finally:
            stop.set()
            editor.join()
        if maybe:
            raise SoakFailure(f"saves of a running daemon failed: {list(maybe)}")
        self.model.must.update(acked)

    def git_checkout_and_back(self) -> None:
        """Commit, switch to a branch whose file has one more line, and come back."""
        self.quiet()
        root = self.workspace.root
        git(root, "add", "-A")
        git(root, "commit", "-q", "--allow-empty", "-m", "snapshot")
        git(root, "checkout", "-q", "-B", "other")
        agent = self.rng.choice(AGENTS)
        path = self.path(agent)
        path.parent.mkdir(parents=True, exist_ok=True)
        text = self.file_text(agent)
        path.write_text(text + f"- [{TS}] {self.fresh('branch')}\n", encoding="utf-8")
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", "on the other branch")
        time.sleep(self.rng.choice([0.0, 0.05, 0.5]))  # the daemon may or may not look
        git(root, "checkout", "-q", self.main_branch)

    def sql_insert(self) -> None:
        agent = self.rng.choice(AGENTS)
        content = self.fresh("row")
        scope = self.rng.choice(["core", "archival"])
        sql(
            self.workspace,
            "INSERT INTO memory_entries(agent, scope, content) VALUES "
            f"({_sql_text(agent)}, {_sql_text(scope)}, {_sql_text(content)})",
        )
        self.model.must[content] = agent
        self.model.rows[content] = agent

    def sql_update(self) -> None:
        if not self.model.rows:
            return
        old, agent = self.rng.choice(sorted(self.model.rows.items()))
        new = self.fresh("updated")
        sql(
            self.workspace,
            f"UPDATE memory_entries SET content = {_sql_text(new)}"
            f" WHERE agent = {_sql_text(agent)} AND content = {_sql_text(old)}",
        )
        del self.model.rows[old], self.model.must[old]
        self.model.rows[new] = self.model.must[new] = agent

    def sql_delete(self) -> None:
        if not self.model.rows:
            return
        content, agent = self.rng.choice(sorted(self.model.rows.items()))
        sql(
            self.workspace,
            f"DELETE FROM memory_entries WHERE agent = {_sql_text(agent)}"
            f" AND content = {_sql_text(content)}",
        )
        del self.model.rows[content], self.model.must[content]

    def kill_and_restart(self) -> None:
        """SIGKILL in the middle of a burst of saves, then start again."""
        daemon = self.daemon
        assert daemon is not None
        pause = self.rng.uniform(0.01, 0.3)

        def kill() -> None:
            time.sleep(pause)
            daemon.proc.send_signal(signal.SIGKILL)
            daemon.proc.wait(timeout=30)

        acked, maybe = self._savers(3, 200, until=kill)
        self.model.must.update(acked)
        self.model.may.update(maybe)
        for client in self.clients:
            client.close()
        self._start_daemon()

    def inotify_overflow(self) -> None:
        """More file events than the kernel queues while the daemon is stopped; a human
        edit among them is lost as an event and must still arrive."""
        assert self.daemon is not None
        self.quiet()
        scratch = watched_scratch_folder(
            self.workspace, lambda: int(self.clients[0].health()["reconciles"])
        )
        agent = self.rng.choice(AGENTS)
        path = self.path(agent)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.daemon.proc.send_signal(signal.SIGSTOP)
        try:
            storm_of_events(scratch)
            content = self.fresh("typed")  # and the event of this edit is dropped
            text = self.file_text(agent)
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(text + f"- [{TS}] {content}\n")
            self.model.must[content] = agent
            self.model.human[content] = agent
        finally:
            self.daemon.proc.send_signal(signal.SIGCONT)

    # --- the check ----------------------------------------------------------------

    def settle_and_check(self) -> None:
        self._until_none(self.problems, "not as the model says", every=0.1)
        self.stats["settles"] += 1

    def problems(self) -> list[str]:
        problems = disagreements(self.workspace)
        if problems:
            return problems
        found: dict[str, Counter[str]] = {}
        for agent in AGENTS:
            path = self.path(agent)
            text = path.read_text(encoding="utf-8") if path.exists() else ""
            doc = parse(text)
            if doc.unparsed:
                problems.append(f"{agent!r}: lines that are not entries: {doc.unparsed[:3]}")
            found[agent] = Counter(entry.content for entry in doc.all_entries())
        for content, agent in self.model.must.items():
            if found[agent][content] != 1:
                problems.append(f"{agent!r}: {content!r} is there {found[agent][content]} times")
        for content, agent in self.model.may.items():
            if found[agent][content] > 1:
                problems.append(f"{agent!r}: {content!r} (in flight) is there more than once")
        for agent, counts in found.items():
            for content in counts:
                if content not in self.model.must and content not in self.model.may:
                    problems.append(f"{agent!r}: {content!r} should not be there")
        return problems
