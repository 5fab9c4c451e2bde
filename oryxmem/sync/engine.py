"""The sync engine: one idempotent reconcile per agent, run on any hint that it may be due.

Events are hints; reconcile_agent decides. It holds the agent's file lock and
one SQLite write transaction, reads both sides and the last agreed state,
asks the pure merge what to do, writes the file first, then the rows, the
history and the new agreed state in the same transaction. A crash anywhere
leaves a state the next run finishes from.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from oryxmem.errors import MemoryFileUnreadableError
from oryxmem.fileio import ConcurrentChange
from oryxmem.service import MemoryService
from oryxmem.store.db import write_transaction
from oryxmem.store.format import Entry
from oryxmem.store.markdown import MarkdownMemoryStore, StatKey
from oryxmem.sync import table
from oryxmem.sync.git import git_operation_in_progress
from oryxmem.sync.reconcile import Plan, additions_as_new_entries, reconcile
from oryxmem.workspace import GLOBAL_AGENT, check_agent_name

if TYPE_CHECKING:
    from sqlite_utils import Database

log = logging.getLogger("oryxmem.sync")

_MAX_ATTEMPTS = 5


class _DryRun(Exception):
    """Raised inside the transaction to roll back a --check pass."""


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


def file_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Append(NamedTuple):
    """Entries one write appended to a file, with the file's stat before and after."""

    before: StatKey | None
    entries: list[Entry]
    after: StatKey


def _file_stat(key: StatKey | None) -> table.FileStat:
    return (key[0], key[1], key[2]) if key else (None, None, None)


class SyncEngine:
    def __init__(self, service: MemoryService) -> None:
        self.service = service
        self.workspace = service.workspace
        self.stale_buffer_seconds = service.config.stale_buffer_seconds

    @property
    def db(self) -> Database:
        return self.service.db

    # --- which agents -----------------------------------------------------------

    def known_agents(self) -> list[str]:
        """The global file, every agent directory, and every safe agent the table names."""
        names = {GLOBAL_AGENT, *self.workspace.agent_names()}
        for (name,) in self.db.execute(
            "SELECT DISTINCT agent FROM memory_entries UNION SELECT agent FROM sync_state"
        ):
            if isinstance(name, str) and (
                name == GLOBAL_AGENT or check_agent_name(self.workspace, name) is None
            ):
                names.add(name)
        return sorted(names)

    def due_agents(self) -> list[str]:
        """Agents whose file or rows changed since they last agreed (a cheap stat per file)."""
        due = set(table.agents_with_pending_changes(self.db))
        agreed = {
            agent: (size, mtime_ns, inode) if status == "ok" else None
            for agent, size, mtime_ns, inode, status in self.db.execute(
                "SELECT agent, size, mtime_ns, inode, status FROM sync_state"
            )
        }
        known = self.known_agents()  # safe names only
        for agent in known:
            try:
                info = os.stat(self.workspace.memory_path(agent))
                now: tuple[int | None, ...] = (info.st_size, info.st_mtime_ns, info.st_ino)
            except FileNotFoundError:
                now = (None, None, None)
            if agreed.get(agent) != now:
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
        progress: Callable[[AgentReport], None] | None = None,
    ) -> list[AgentReport]:
        """Reconcile every agent (or those named, or with only_due those whose file or
        rows changed since they last agreed: a stat and a query each)."""
        reports = []
        if not dry_run:
            reports += self.quarantine_unsafe_agents()
            for agent in self.known_agents():
                # A writer killed mid-rewrite leaves its temp file: never the truth.
                for leftover in self.service.markdown_store(agent).clean_temp_files():
                    log.info("removed %s, left by an interrupted write", leftover)
        if agents is None:
            agents = self.due_agents() if only_due else self.known_agents()
        for agent in agents:
            report = self.reconcile_agent(agent, dry_run=dry_run)
            reports.append(report)
            if progress is not None:
                progress(report)
        if not dry_run:
            with write_transaction(self.db):
                table.prune_changes(self.db)
        return reports

    def quarantine_unsafe_agents(self) -> list[AgentReport]:
        """Rows whose agent name can never be a directory: quarantined, and reported."""
        reports = []
        with write_transaction(self.db):
            for name in table.unsafe_agents_with_rows(self.db):
                count = table.quarantine_agent(self.db, name)
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
            return AgentReport(agent, "skipped", "unsafe agent name")
        busy = git_operation_in_progress(self.workspace.root)
        if busy:
            return AgentReport(agent, "deferred", f"git is busy ({busy}); retrying later")
        if not dry_run and self._settled_now(agent):
            return AgentReport(agent, "unchanged")  # no lock, no transaction: the common echo
        store = self.service.markdown_store(agent)
        for _ in range(_MAX_ATTEMPTS):
            try:
                return self._reconcile_once(agent, store, dry_run)
            except ConcurrentChange:
                continue  # an editor wrote while we did: read both sides again
        return AgentReport(agent, "deferred", "the file kept changing; retrying later")

    def _settled_now(self, agent: str) -> bool:
        stat = table.file_stat(self.workspace.memory_path(agent))
        return stat is not None and table.is_settled(self.db, agent, stat)

    def _reconcile_once(self, agent: str, store: MarkdownMemoryStore, dry_run: bool) -> AgentReport:
        report = AgentReport(agent)
        with store.lock.hold():
            try:
                doc, key = store.current_locked()
            except MemoryFileUnreadableError as error:
                return self._mark_unusable(agent, "unreadable", error.message, dry_run)
            if not doc.parseable:
                lines = ", ".join(map(str, doc.conflict_lines))
                detail = f"git conflict markers on lines {lines}; resolve them to sync"
                return self._mark_unusable(agent, "conflicted", detail, dry_run)
            try:
                with write_transaction(self.db):
                    limit = self.service.config.max_content_chars
                    report.quarantined = table.quarantine_invalid_rows(self.db, agent, limit)
                    state = table.read_state(self.db, agent, with_agreed=False)
                    settled = (
                        state is not None
                        and not report.quarantined
                        and table.is_current(self.db, state)
                    )
                    if settled and state and _file_stat(key) == state.file_stat:
                        report.status = "unchanged"  # the echo of our own write, or a rescan
                        table.index_rows(self.db, agent)
                        return report
                    sha = file_sha256(doc.text) if key else None
                    if settled and state and state.sha256 == sha:
                        report.status = "unchanged"  # touched, same bytes
                        self._save_state(agent, key, sha, [], previous=[])
                        table.index_rows(self.db, agent)
                        return report
                    if state is not None:
                        state = table.read_state(self.db, agent)  # now the agreed ids too
                    protected = (
                        table.protected_entries(self.db, agent, self.stale_buffer_seconds)
                        if state and self.stale_buffer_seconds
                        else set()
                    )
                    file_entries = doc.all_entries()
                    plan = reconcile(
                        file_entries,
                        table.read_rows(self.db, agent),
                        state.agreed if state else None,
                        protected,
                    )
                    self._describe(report, plan, file_entries)
                    if dry_run:
                        raise _DryRun
                    if plan.changes_file:
                        # Applied to the file this plan was made from, or refused (git or an
                        # editor wrote since it was read): then read both sides again.
                        store.edit_locked(
                            additions_as_new_entries(plan.file_additions),
                            plan.file_removals,
                            based_on=key,
                        )
                        doc, key = store.current_locked()
                        if key != store.written_key:
                            raise ConcurrentChange(store.path)  # another writer right after
                        sha = file_sha256(doc.text)
                    table.apply_plan_to_rows(self.db, agent, plan, file_entries)
                    table.index_rows(self.db, agent)
                    previous = state.agreed if state is not None else None
                    self._save_state(agent, key, sha, plan.agreed, previous)
            except _DryRun:
                return report
        for line in report.lost:
            log.warning("%s: kept in history (the file won): %s", agent or "(global)", line)
        if report.drift:
            log.info("reconciled %s", report.summary())
        return report

    def record_saves(self, agent: str, appends: Sequence[Append], source: str) -> bool:
        """Mirror entries just appended to MEMORY.md into the rows, in one transaction.

        ``appends`` are consecutive appends of this process, each with the file's
        stat before and after it. The entries always become rows (those a reconcile
        has not taken in already), with their history: so they are kept even if
        the file loses them before the next reconcile (a stale editor buffer, a
        branch switched), which then puts them back. When the agreed state matches
        the file as it was before one of the appends (and no row changed since),
        the state moves to the last stat and True says both sides agree; otherwise
        (someone else wrote too) returns False: reconcile soon.
        """
        entries = [entry for append in appends for entry in append.entries]
        with write_transaction(self.db):
            table.record_history_rows(
                self.db, [table.history_row(agent, "add", source, entry) for entry in entries]
            )
            # Whether both sides agreed just before these appends: asked before the
            # rows go in (their insert is itself a change to the rows).
            state = table.read_state(self.db, agent, with_agreed=False)
            start: int | None = None
            all_taken = False
            if state is None:  # a new agent: in sync if neither side had anything yet
                has_rows = self.db.execute(
                    "SELECT 1 FROM memory_entries WHERE agent = ? LIMIT 1", [agent]
                ).fetchone()
                start = 0 if appends[0].before is None and has_rows is None else None
            elif table.is_current(self.db, state):  # status ok, no row changed since
                agreed_stat = state.file_stat
                stats = [_file_stat(append.before) for append in appends]
                start = stats.index(agreed_stat) if agreed_stat in stats else None
                all_taken = start is None and _file_stat(appends[-1].after) == agreed_stat
            missing = table.entries_not_in_rows(self.db, agent, entries)
            table.insert_rows(self.db, agent, missing, source)
            if start is not None:
                agreed = [e.entry_id for append in appends[start:] for e in append.entries]
                self._save_state(agent, appends[-1].after, None, agreed, [])
                return True
            return all_taken and not missing

    def _save_state(
        self,
        agent: str,
        key: StatKey | None,
        sha: str | None,
        agreed: list[str],
        previous: list[str] | None = None,
    ) -> None:
        """The new agreed state; with ``previous`` only the ids that differ are written."""
        inode, size, mtime_ns = _file_stat(key)
        table.write_state(
            self.db,
            table.SyncState(
                agent=agent,
                path=str(self.workspace.memory_path(agent)),
                size=size,
                mtime_ns=mtime_ns,
                inode=inode,
                sha256=sha,
                agreed=agreed,
                status="ok",
                detail=None,
                change_seq=table.latest_change_seq(self.db),
            ),
            previous,
        )

    def _mark_unusable(self, agent: str, status: str, detail: str, dry_run: bool) -> AgentReport:
        """A conflicted or unreadable file: neither read nor written; the state says why."""
        state = table.read_state(self.db, agent, with_agreed=False)
        if not dry_run:
            with write_transaction(self.db):
                table.write_state(
                    self.db,
                    table.SyncState(
                        agent=agent,
                        path=str(self.workspace.memory_path(agent)),
                        size=state.size if state else None,
                        mtime_ns=state.mtime_ns if state else None,
                        inode=state.inode if state else None,
                        sha256=state.sha256 if state else None,
                        agreed=[],
                        status=status,
                        detail=detail,
                        change_seq=table.latest_change_seq(self.db),
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
