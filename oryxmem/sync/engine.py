"""The sync engine: one idempotent reconcile per agent, run on any hint that it may be due.

Events are hints; reconcile_agent decides. Holding the agent's file lock, it
reads both sides and the last agreed state in one read snapshot, asks the pure
merge what to do, writes the file first, then the rows, the history and the new
agreed state in one short write transaction: the database's write lock is not
held while the file is written and synced, so other programs' writes are not
refused meanwhile. Rows that changed after the snapshot make the pass start
again; a crash anywhere leaves a state the next run finishes from.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from oryxmem.config import Config
from oryxmem.errors import MemoryFileUnreadableError
from oryxmem.fileio import ConcurrentChange, FileStat, file_stat, retry_on_change
from oryxmem.store import quarantine, rows
from oryxmem.store.db import read_snapshot, select_in, write_transaction
from oryxmem.store.format import Entry, MemoryDocument
from oryxmem.store.indexdb import index_floor
from oryxmem.store.markdown import MarkdownFiles, MarkdownMemoryStore
from oryxmem.sync.git import git_operation_in_progress
from oryxmem.sync.reconcile import Plan, number_rows, reconcile
from oryxmem.workspace import GLOBAL_AGENT, Workspace, agent_name_problem, check_agent_name

if TYPE_CHECKING:
    from oryxmem.store.db import Database

log = logging.getLogger("oryxmem.sync")

RECONCILE_ATTEMPTS = 5
# The changes one transaction of prune_changes forgets at most (a few milliseconds).
PRUNE_CHUNK = 2000
# A MEMORY.md (or its folder) gone this long is deleted: its entries leave the rows
# (each kept in memory_history); gone for less, it may be an editor's save or a git
# checkout in the middle, and reconcile waits.
DELETION_GRACE_SECONDS = 1.0


class _DryRun(Exception):
    """Raised inside the transaction to roll back a --check pass."""


@dataclass
class _Look:
    """What one reconcile read in one snapshot: the agreed state, the file's lines that are
    not entries and its hash, the last change to the rows it saw, and what it decided
    (``plan`` None: nothing, or with ``touched`` only the state moves)."""

    state: rows.SyncState | None
    notes: list[tuple[int, str]]
    sha: str | None
    seen_seq: int
    plan: Plan | None = None
    file_entries: list[Entry] = field(default_factory=list)
    touched: bool = False
    base: list[str] | None = None  # what the plan took as agreed


@dataclass
class AgentReport:
    """What one reconcile of one agent did (or, for a check, would do)."""

    agent: str
    status: str = "ok"  # ok | unchanged | conflicted | unreadable | deferred | skipped
    detail: str | None = None
    file_added: list[str] = field(default_factory=list)
    file_removed: list[str] = field(default_factory=list)
    rows_added: list[str] = field(default_factory=list)
    rows_removed: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)
    quarantined: list[str] = field(default_factory=list)
    # Told once, when first seen: lines kept as they are that are not entries, and
    # what lock-time repairs did (a torn line finished from the journal), each as
    # "path:line: what".
    kept: list[str] = field(default_factory=list)
    repairs: list[str] = field(default_factory=list)

    @property
    def drift(self) -> bool:
        return bool(
            self.file_added
            or self.file_removed
            or self.rows_added
            or self.rows_removed
            or self.lost
            or self.quarantined
        )

    def summary(self) -> str:
        name = self.agent or "(global)"
        if self.status not in ("ok", "unchanged"):
            return f"{name}: {self.status}: {self.detail}"
        parts = [
            f"{label} {len(items)}"
            for label, items in (
                ("+file", self.file_added),
                ("-file", self.file_removed),
                ("+rows", self.rows_added),
                ("-rows", self.rows_removed),
                ("lost", self.lost),
                ("restored", self.restored),
                ("quarantined", self.quarantined),
            )
            if items
        ]
        return f"{name}: {', '.join(parts) if parts else 'in sync'}"

    def notices(self) -> list[str]:
        """The lines to tell a person once: kept lines and repairs."""
        return self.kept + self.repairs


def kept_lines(doc: MemoryDocument) -> list[tuple[int, str]]:
    """The lines inside the memory sections that the parser kept but did not understand."""
    return [(line.line_number, line.text) for line in doc.unparsed]


class SyncEngine:
    def __init__(
        self, workspace: Workspace, db: Database, files: MarkdownFiles, config: Config
    ) -> None:
        self.workspace = workspace
        self.db = db
        self.files = files
        self.config = config  # read at each use: a daemon may take a new one while running
        # Each agent's TOMBSTONES as its last reconcile read them: one changed since (a
        # pull brought new ones) makes the agent due even when MEMORY.md did not change.
        self._tombstones_seen: dict[str, tuple[int, int, int] | None] = {}
        # What each agent's file and rows agree on as far as MEMORY.md goes, when a pass
        # wrote the file and could not commit its plan (the rows moved under it): the
        # agreed ids less what it took out of the file, plus what it wrote into it from
        # the rows. The next pass plans on this, so it does not take the lines it wrote
        # for someone else's (a row deleted or updated meanwhile came back, or lost).
        self._unagreed: dict[str, list[str]] = {}

    # --- which agents -----------------------------------------------------------

    def known_agents(self) -> list[str]:
        """The global file, every agent directory, and every safe agent the table names."""
        names = {GLOBAL_AGENT, *self.workspace.agent_names()}
        for (name,) in self.db.execute(
            "SELECT DISTINCT agent FROM memory_entries UNION SELECT agent FROM sync_state"
        ):
            if isinstance(name, str) and self._safe(name):
                names.add(name)
        return sorted(names)

    def due_agents(self) -> list[str]:
        """Agents whose file or rows changed since they last agreed (a cheap stat per file)."""
        due = set(rows.agents_with_pending_changes(self.db))
        agreed = rows.agreed_file_stats(self.db)
        known = self.known_agents()  # safe names only
        for agent in known:
            stat = file_stat(self.workspace.memory_path(agent))
            if agent not in agreed or agreed[agent] != stat or self._tombstones_changed(agent):
                due.add(agent)
        safe = set(known)
        return sorted(name for name in due if name in safe or self._safe(name))

    def _safe(self, agent: str) -> bool:
        return agent == GLOBAL_AGENT or check_agent_name(self.workspace, agent) is None

    # --- reconcile ----------------------------------------------------------------

    def reconcile_all(
        self,
        agents: Iterable[str] | None = None,
        *,
        dry_run: bool = False,
        only_due: bool = False,
        prune: bool = True,
        progress: Callable[[AgentReport], None] | None = None,
    ) -> list[AgentReport]:
        """Reconcile every agent (or those named, or with only_due those whose file or
        rows changed since they last agreed: a stat and a query each), then forget the
        changes taken in (unless ``prune`` is False: the caller does it later)."""
        reports = []
        if not dry_run:
            reports += self.quarantine_unsafe_agents()
            for agent in self.known_agents():
                # A writer killed mid-rewrite leaves its temp file: never the truth.
                for leftover in self.files.get(agent).clean_temp_files():
                    log.info("removed %s, left by an interrupted write", leftover)
        if agents is None:
            agents = self.due_agents() if only_due else self.known_agents()
        for agent in agents:
            report = self.reconcile_agent(agent, dry_run=dry_run)
            reports.append(report)
            if progress is not None:
                progress(report)
        if prune and not dry_run:
            self.prune_changes()
        return reports

    def prune_changes(self) -> int:
        """Forget the changes every agent and every index have taken in (the indexes'
        lowest cursor is read first, from their own file: it only rises), PRUNE_CHUNK
        to a transaction: a long change log (a million rows imported) never holds the
        write lock for more than milliseconds at a time."""
        floor = index_floor(self.workspace.db_path)
        pruned = 0
        while True:
            with write_transaction(self.db):
                count = rows.prune_changes(self.db, floor, PRUNE_CHUNK)
            pruned += count
            if count < PRUNE_CHUNK:
                return pruned

    def quarantine_unsafe_agents(self) -> list[AgentReport]:
        """Rows whose agent name can never be a directory: quarantined, and reported."""
        reports = []
        with write_transaction(self.db):
            for name in quarantine.unsafe_agents_with_rows(self.db):
                count = quarantine.quarantine_agent(self.db, name)
                log.warning("quarantined %d row(s) of unsafe agent name %r", count, name)
                reports.append(
                    AgentReport(
                        str(name),
                        quarantined=[f"{count} row(s): unsafe agent name"],
                        detail="unsafe agent name",
                    )
                )
        return reports

    def reconcile_agent(self, agent: str, *, dry_run: bool = False) -> AgentReport:
        """Make MEMORY.md and the rows of one agent agree. Safe to run any time, twice."""
        if not self._safe(agent):
            if not dry_run and agent_name_problem(agent):  # rows another program wrote
                for report in self.quarantine_unsafe_agents():  # quarantined now, as all
                    if report.agent == agent:  # other bad rows are, not at the next pass
                        return report
            return AgentReport(agent, "skipped", "unsafe agent name")
        busy = git_operation_in_progress(self.workspace.root)
        if busy:
            return AgentReport(agent, "deferred", f"git is busy ({busy}); retrying later")
        if not dry_run and self._settled_now(agent):
            return AgentReport(agent, "unchanged")  # no lock, no transaction: the common echo
        store = self.files.get(agent)
        try:
            report = retry_on_change(
                RECONCILE_ATTEMPTS, lambda: self._reconcile_once(agent, store, dry_run)
            )
        except ConcurrentChange:  # an editor kept writing while we did
            return AgentReport(agent, "deferred", "the file kept changing; retrying later")
        for notice in report.notices():
            log.warning("%s", notice)
        return report

    def _settled_now(self, agent: str) -> bool:
        return not self._tombstones_changed(agent) and rows.is_settled(
            self.db, agent, file_stat(self.workspace.memory_path(agent))
        )

    def _tombstones_changed(self, agent: str) -> bool:
        stamp = self.files.get(agent).tombstones.stamp()
        return stamp is not None and self._tombstones_seen.get(agent) != stamp

    def _reconcile_once(self, agent: str, store: MarkdownMemoryStore, dry_run: bool) -> AgentReport:
        report = AgentReport(agent)
        with store.lock.hold():
            try:
                doc, key = store.current_locked()
            except MemoryFileUnreadableError as error:
                return self._mark_unusable(agent, "unreadable", error.message, dry_run)
            finally:
                report.repairs = store.take_repairs()
            if not doc.parseable:
                lines = ", ".join(map(str, doc.conflict_lines))
                detail = f"git conflict markers on lines {lines}; resolve them to sync"
                return self._mark_unusable(agent, "conflicted", detail, dry_run)
            # A check runs in one write transaction, rolled back: it changes nothing.
            checking = write_transaction(self.db) if dry_run else contextlib.nullcontext()
            try:
                with checking:
                    self._reconcile_locked(agent, store, doc, key, report, dry_run)
            except _DryRun:
                pass
        for line in report.lost:
            log.warning("%s: kept in history (the file won): %s", agent or "(global)", line)
        if report.drift:
            log.info("reconciled %s", report.summary())
        return report

    def _reconcile_locked(
        self,
        agent: str,
        store: MarkdownMemoryStore,
        doc: MemoryDocument,
        key: FileStat | None,
        report: AgentReport,
        dry_run: bool,
    ) -> None:
        """The reconcile proper, under the file's lock. Both sides are read and the plan
        made in one read snapshot; the file is written with no transaction open; the write
        lock is taken only to apply the plan to the rows and save the state."""
        self._fix_rows(agent, report, dry_run)
        stamp = store.tombstones.stamp()
        with read_snapshot(self.db):
            look = self._look(agent, store, (doc, key), report)
        if look.plan is not None:
            self._describe(report, look.plan, look.file_entries)
        if dry_run:
            raise _DryRun
        if look.plan is not None or look.touched:
            self._carry_out(agent, store, key, look)
        if look.plan is not None and look.plan.file_removals:
            stamp = store.tombstones.stamp()  # with what this pass wrote into them
        self._tombstones_seen[agent] = stamp  # taken in: they changed nothing more

    def _fix_rows(self, agent: str, report: AgentReport, dry_run: bool) -> None:
        """The lock-time repairs into history, and the rows no file can hold quarantined:
        a write transaction only when there is one of them."""
        state = rows.read_state(self.db, agent, with_agreed=False)
        since = state.change_seq if state is not None else 0
        limit = self.config.max_content_chars
        repairs = [] if dry_run else report.repairs
        if not repairs and not quarantine.rows_to_fix(self.db, agent, limit, since):
            return
        with write_transaction(self.db):
            self._record_repairs(agent, repairs)
            report.quarantined = quarantine.quarantine_invalid_rows(self.db, agent, limit, since)

    def _look(
        self,
        agent: str,
        store: MarkdownMemoryStore,
        read: tuple[MemoryDocument, FileStat | None],
        report: AgentReport,
    ) -> _Look:
        """Read both sides (the file as ``read`` under its lock: its text and stat) and the
        agreed state, and decide (in the caller's snapshot)."""
        doc, key = read
        state = rows.read_state(self.db, agent, with_agreed=False)
        notes = self._take_stock(store, doc, state, report)
        sha = doc.lines.sha256() if key else None
        look = _Look(state, notes, sha, rows.latest_change_seq(self.db))
        forgetting = self._tombstones_changed(agent) and bool(store.tombstones.read())
        if not forgetting and self._nothing_to_do(agent, look, key, report):
            return look
        if state is not None:
            look.state = rows.read_state(self.db, agent)  # now the agreed ids too
        look.file_entries = doc.all_entries()
        look.base = self._unagreed.get(agent, look.state.agreed if look.state else None)
        look.plan = self._plan(agent, look.file_entries, look.state, key, look.base)
        return look

    def _carry_out(
        self, agent: str, store: MarkdownMemoryStore, key: FileStat | None, look: _Look
    ) -> None:
        """Apply what was decided: the file first (_write_plan), then the rows, their
        history and the new agreed state in one short write transaction. If this agent's
        rows changed after the snapshot, ConcurrentChange: the pass runs again from the
        file as now written, planning on what this one wrote as agreed."""
        plan, sha, notes, written_ns = look.plan, look.sha, look.notes, None
        if plan is not None and plan.changes_file:
            self._unagreed[agent] = _write_plan(store, key, look, plan)
            written_ns = time.time_ns()  # under the lock, as a save's is
            doc, key = store.current_locked()
            if key != store.written_key:
                raise ConcurrentChange(store.path)  # another writer right after
            sha, notes = doc.lines.sha256(), kept_lines(doc)
        with write_transaction(self.db):
            if rows.has_pending_changes(self.db, agent, look.seen_seq):
                raise ConcurrentChange(store.path)  # the rows moved under the plan
            if plan is None:  # the same bytes under a new stat: only the state moves
                self._save_state(agent, key, sha, [], notes, previous=[])
                return
            _apply_plan_to_rows(self.db, agent, plan, look.file_entries, written_ns)
            previous = look.state.agreed if look.state is not None else None
            self._save_state(agent, key, sha, plan.agreed, notes, previous)
        self._unagreed.pop(agent, None)  # agreed, and saved

    def _take_stock(
        self,
        store: MarkdownMemoryStore,
        doc: MemoryDocument,
        state: rows.SyncState | None,
        report: AgentReport,
    ) -> list[tuple[int, str]]:
        """The file's lines that are not entries (those not told before go in the report)."""
        notes = kept_lines(doc)
        told = set(state.notes) if state is not None else set()
        report.kept = [
            f"{store.path}:{line}: kept as it is, not an entry: {text}"
            for line, text in notes
            if (line, text) not in told
        ]
        return notes

    def _nothing_to_do(
        self, agent: str, look: _Look, key: FileStat | None, report: AgentReport
    ) -> bool:
        """True when the file and the rows already agree (``look.touched``: the same bytes
        under a new stat, which the state takes in), or the file is just gone (an editor's
        unlink and create): the report says which."""
        state = look.state
        settled = state is not None and not report.quarantined and rows.is_current(self.db, state)
        if settled and state is not None and key == state.file_stat:
            report.status = "unchanged"  # the echo of our own write, or a rescan
            return True
        just_gone = key is None and state is not None and state.file_stat is not None
        if just_gone and self._gone_for(agent) < DELETION_GRACE_SECONDS:
            report.status = "deferred"  # an editor's unlink and create, a checkout: wait
            report.detail = "MEMORY.md was just removed; its entries go unless it returns"
            return True
        if settled and state is not None and look.sha is not None and state.sha256 == look.sha:
            report.status = "unchanged"  # touched, same bytes
            look.touched = True
            return True
        return False

    def _plan(
        self,
        agent: str,
        file_entries: list[Entry],
        state: rows.SyncState | None,
        key: FileStat | None,
        agreed: list[str] | None,
    ) -> Plan:
        """What to change on each side from what both ``agreed`` on, the entries a stale
        buffer dropped protected."""
        protected = (  # a stale buffer drops lines; a file that is gone was removed
            rows.protected_entries(
                self.db,
                agent,
                {entry.entry_id for entry in file_entries},
                self.config.stale_buffer_seconds,
                time.time_ns(),
            )
            if state and key is not None
            else set()
        )
        return reconcile(
            file_entries,
            number_rows(rows.read_rows(self.db, agent)),
            agreed,
            protected,
            self.files.get(agent).tombstones.read(),
        )

    def _gone_for(self, agent: str) -> float:
        """Seconds since the agent's MEMORY.md (or its folder) was removed, as the
        modification time of the folder that held it says (inf: longer than we know)."""
        path = self.workspace.memory_path(agent)
        for holder in (path.parent, path.parent.parent):
            try:
                return time.time() - os.stat(holder).st_mtime
            except FileNotFoundError:
                continue
        return float("inf")

    def _record_repairs(self, agent: str, repairs: Sequence[str]) -> None:
        if repairs:
            rows.record_history_rows(
                self.db,
                [(agent, "repair", "file", None, None, None, None, r, None, 0) for r in repairs],
            )

    def _save_state(
        self,
        agent: str,
        key: FileStat | None,
        sha: str | None,
        agreed: list[str],
        notes: Sequence[tuple[int, str]],
        previous: list[str] | None = None,
    ) -> None:
        """The new agreed state; with ``previous`` only the ids that differ are written."""
        path = str(self.workspace.memory_path(agent))
        state = rows.agreed_state(self.db, agent, path, key, sha, agreed, notes)
        rows.write_state(self.db, state, previous)

    def _mark_unusable(self, agent: str, status: str, detail: str, dry_run: bool) -> AgentReport:
        """A conflicted or unreadable file: neither read nor written; the state says why."""
        state = rows.read_state(self.db, agent, with_agreed=False)
        if not dry_run:
            with write_transaction(self.db):
                rows.write_state(
                    self.db,
                    rows.SyncState(
                        agent=agent,
                        path=str(self.workspace.memory_path(agent)),
                        file_stat=state.file_stat if state else None,
                        sha256=state.sha256 if state else None,
                        agreed=[],
                        status=status,
                        detail=detail,
                        change_seq=rows.latest_change_seq(self.db),
                        notes=state.notes if state else [],
                    ),
                    [] if state else None,  # keep the agreed ids as they are
                )
            if state is None or state.status != status:
                log.warning("%s: %s: %s", agent or "(global)", status, detail)
        return AgentReport(agent, status, detail)

    @staticmethod
    def _describe(report: AgentReport, plan: Plan, file_entries: list[Entry]) -> None:
        by_id = {entry.entry_id: entry for entry in file_entries}
        report.file_added = [entry.render() for entry in plan.file_additions]
        report.file_removed = [by_id[i].render() for i in plan.file_removals]
        report.rows_added = [entry.render() for entry in plan.row_inserts]
        report.rows_removed = [str(row_id) for row_id in plan.row_deletes]
        report.lost = [entry.render() for _, entry, _ in plan.lost]
        report.restored = [entry.render() for entry in plan.restored]


def _write_plan(
    store: MarkdownMemoryStore, key: FileStat | None, look: _Look, plan: Plan
) -> list[str]:
    """The plan's edits written to MEMORY.md as the plan read it (or ConcurrentChange: git
    or an editor wrote since). Gives what the file and the rows agree on as far as the
    file goes, for the next pass if this one cannot commit: what the plan took as agreed
    less the lines it took out, plus those it wrote from the rows."""
    store.edit_locked(plan.file_additions, plan.file_removals, based_on=key)
    if plan.file_removals and key is not None:
        _tombstone_row_deletes(store, plan, look.file_entries)
    taken_out = set(plan.file_removals)
    kept = [entry_id for entry_id in look.base or () if entry_id not in taken_out]
    return kept + [entry.entry_id for entry in plan.file_additions]


def _tombstone_row_deletes(
    store: MarkdownMemoryStore, plan: Plan, file_entries: Sequence[Entry]
) -> None:
    """Rows deleted in the database: their tombstones now. A line gone from the file may
    be git's doing (a checkout, a stash): it is noted when it is committed."""
    by_id = {entry.entry_id: entry for entry in file_entries}
    store.tombstones.add((i, by_id[i].ts) for i in plan.file_removals if i in by_id)


def _apply_plan_to_rows(
    db: Database, agent: str, plan: Plan, file_entries: Sequence[Entry], written_ns: int | None
) -> None:
    """Make the rows match what the plan decided, and write every add and remove to history
    (with ``written_ns``, when the plan's additions were written into the file)."""
    events: list[rows.HistoryRow] = []
    losers = {row_id: (entry, why) for row_id, entry, why in plan.lost}
    doomed = sorted(set(plan.row_deletes))
    for row_id, scope, ts, content, entry_id in select_in(
        db,
        "SELECT id, scope, ts, content, entry_id FROM memory_entries WHERE id IN ({marks})",
        doomed,
    ):
        if row_id in losers:
            events.append(rows.history_row(agent, "lost", "db", *losers[row_id]))
        else:
            entry = Entry(scope, ts, content, entry_id)
            events.append(rows.history_row(agent, "remove", "file", entry))
    db.conn.executemany("DELETE FROM memory_entries WHERE id = ?", [[r] for r in doomed])
    by_id = {entry.entry_id: entry for entry in file_entries}
    events += [rows.history_row(agent, "remove", "db", by_id[i]) for i in plan.file_removals]
    restored = set(plan.restored)
    events += [
        rows.history_row(
            agent, "restore" if entry in restored else "add", "db", entry, written_ns=written_ns
        )
        for entry in plan.file_additions
    ]
    rows.insert_rows(db, agent, plan.row_inserts, "file")
    events += [rows.history_row(agent, "add", "file", entry) for entry in plan.row_inserts]
    db.conn.executemany(
        "UPDATE memory_entries SET entry_id = ? WHERE id = ?",
        [[entry_id, row_id] for row_id, entry_id in plan.row_restamps],
    )
    rows.record_history_rows(db, events)
