"""The daemon's git sync (``sync.git.remote`` set): commit memory, fetch, merge, push.

One pass:

1. nothing while git is mid-operation (a person's rebase, merge, bisect): wait;
2. fetch the branch from the remote (outside any lock: the network may be slow);
3. under every agent's file lock (no save lands in the middle): commit what changed in
   ``.oryxos/agents`` and ``.oryxos/memory`` (MEMORY.md, TOMBSTONES: never anything
   else; the tombstones of entries removed by hand first; refused while a line it
   would add looks like a credential), one commit naming agents and line counts; then merge
   what was fetched, through the merge driver. A merge that would touch a file outside
   ``.oryxos/`` is not made (the person pulls that themselves); one that fails is
   aborted: the clone is never left mid-merge;
4. push, never forced; a rejected push (someone pushed first) is merged next pass.

A failure (the network, a rejected push) backs off: the interval doubles, up to 10
minutes, and is said once in the log. The database, run/ and sessions never travel
(.oryxos/.gitignore): each clone rebuilds its rows from the files the merge wrote.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oryxmem.config import Config
from oryxmem.store.markdown import MarkdownFiles
from oryxmem.sync.git import find_git_dir, git_operation_in_progress
from oryxmem.sync.gitrepo import GitError, Repo
from oryxmem.sync.gitsetup import (
    credentials_added,
    driver_missing,
    memory_pathspec,
    tombstone_removals,
)
from oryxmem.workspace import GLOBAL_AGENT, MEMORY_FILE, Workspace

log = logging.getLogger("oryxmem.sync")
MAX_BACKOFF_SECONDS = 600.0
IDENTITY = ("-c", "user.name=oryxmem", "-c", "user.email=oryxmem@localhost")


@dataclass
class GitSyncState:
    last_pull: float | None = None  # time.time() of the last fetch that worked
    last_push: float | None = None
    last_commit: str | None = None
    ahead: int = 0
    behind: int = 0
    waiting: str | None = None  # why the last pass did nothing (git busy, a secret, ...)
    last_error: str | None = None
    failures: int = 0

    def as_dict(self) -> dict[str, Any]:
        stamp = _utc
        return {
            "last_pull": stamp(self.last_pull),
            "last_push": stamp(self.last_push),
            "last_commit": self.last_commit,
            "ahead": self.ahead,
            "behind": self.behind,
            "waiting": self.waiting,
            "last_error": self.last_error,
        }


def _bisecting(workspace: Workspace) -> str | None:
    """A bisect checks out old commits for a while: no commit or merge on top of them."""
    git_dir = find_git_dir(workspace.root)
    return "BISECT_LOG" if git_dir is not None and (git_dir / "BISECT_LOG").exists() else None


def _utc(at: float | None) -> str | None:
    return None if at is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


class GitSync:
    def __init__(self, workspace: Workspace, files: MarkdownFiles, config: Config) -> None:
        self.workspace = workspace
        self.files = files
        self.config = config
        self.state = GitSyncState()
        self._told_missing = False

    @property
    def remote(self) -> str:
        return str(self.config.get("sync.git.remote"))

    def interval(self) -> float:
        base = float(self.config.get("sync.git.interval_seconds"))
        backoff = base * 2.0 ** min(self.state.failures, 10)
        return float(min(backoff, max(base, MAX_BACKOFF_SECONDS)))

    def step(self) -> None:
        """One pass; never raises for git's failures (they are in the state and the log)."""
        busy = git_operation_in_progress(self.workspace.root) or _bisecting(self.workspace)
        if busy:
            self.state.waiting = f"git is mid-operation ({busy}); waiting"
            return
        self.state.waiting = None
        try:
            self._pass(Repo.holding(self.workspace.root))
        except GitError as error:
            self.state.failures += 1
            if self.state.last_error != error.message:
                log.warning("git sync: %s; retrying in %.0f s", error, self.interval())
            self.state.last_error = error.message
            return
        if self.state.failures:
            log.info("git sync: working again")
        self.state.failures = 0
        self.state.last_error = None

    def _pass(self, repo: Repo) -> None:
        if not self._told_missing:
            missing = driver_missing(self.workspace)
            if missing:
                log.warning("git sync: %s", missing)
            self._told_missing = True  # asked once: a clone's config rarely changes
        branch = (
            str(self.config.get("sync.git.branch"))
            or repo.git("rev-parse", "--abbrev-ref", "HEAD").strip()
        )
        fetched = self._fetch(repo, branch)
        with self._all_locks():
            if not self._commit(repo):
                return
            if fetched is not None and not self._merge(repo, fetched):
                return
        self._count(repo, fetched)
        if self.state.ahead:
            repo.git("push", "-q", "--no-verify", self.remote, f"HEAD:refs/heads/{branch}")
            self.state.last_push = time.time()
            self.state.ahead = 0

    def _fetch(self, repo: Repo, branch: str) -> str | None:
        code, said = repo.try_git("fetch", "-q", "--no-tags", self.remote, branch)
        if code != 0:
            if "couldn't find remote ref" in said:  # a new branch there: nothing to merge
                self.state.last_pull = time.time()
                return None
            raise GitError(("fetch", self.remote, branch), code, said)
        self.state.last_pull = time.time()
        return repo.git("rev-parse", "FETCH_HEAD").strip()

    @contextlib.contextmanager
    def _all_locks(self) -> Iterator[None]:
        agents = sorted({GLOBAL_AGENT, *self.workspace.agent_names()})
        with contextlib.ExitStack() as stack:
            for agent in agents:
                stack.enter_context(self.files.get(agent).lock.hold())
            yield

    def _memory_paths(self, repo: Repo) -> list[str]:
        os_dir = repo.relative(self.workspace.os_dir)
        return [f"{os_dir}/agents", f"{os_dir}/memory", f"{os_dir}/.gitattributes"]

    def _commit(self, repo: Repo) -> bool:
        """Commit what changed in memory; False when it must not be (a credential)."""
        paths = [p for p in self._memory_paths(repo) if (repo.top / p).exists()]
        if not paths:
            return True
        repo.git("add", "-A", "--", *paths)
        if not _staged(repo, paths):
            return True
        pathspec = memory_pathspec(repo, self.workspace)
        found = self._credentials(repo, pathspec)
        if found:
            repo.git("reset", "-q", "--", *paths)  # staged by us just now: not committed
            self.state.waiting = f"not committed: {found} looks like a credential (oryxmem scan)"
            log.warning("git sync: nothing committed or pushed: %s", self.state.waiting)
            return False
        tombstone_removals(repo, pathspec)
        staged = _staged(repo, paths)
        numstat = repo.git("diff", "--cached", "--numstat", "--", *staged)
        message = commit_message(numstat)
        # Only these files: whatever else a person has staged stays staged, uncommitted.
        repo.git(*self._identity(repo), "commit", "-q", "--no-verify", "-m", message, "--", *staged)
        self.state.last_commit = message
        return True

    def _credentials(self, repo: Repo, pathspec: str) -> str | None:
        """The first staged line added to a MEMORY.md that looks like a credential."""
        if str(self.config.get("memory.secrets")) == "allow":
            return None
        found = credentials_added(repo, "diff", "--cached", "--", pathspec)
        return found[0] if found else None

    def _identity(self, repo: Repo) -> tuple[str, ...]:
        code, email = repo.try_git("config", "user.email")
        return () if code == 0 and email else IDENTITY

    def _merge(self, repo: Repo, fetched: str) -> bool:
        code, _ = repo.try_git("merge-base", "--is-ancestor", fetched, "HEAD")
        if code == 0:
            return True  # we have it all already
        outside = [
            path
            for path in repo.git("diff", "--name-only", f"HEAD...{fetched}").splitlines()
            if not path.startswith(f"{repo.relative(self.workspace.os_dir)}/")
        ]
        if outside:
            self.state.waiting = (
                f"the remote changed files outside .oryxos/ ({outside[0]}, ...): pull them"
                " yourself; memory waits"
            )
            log.warning("git sync: %s", self.state.waiting)
            return False
        code, said = repo.try_git(
            *self._identity(repo), "merge", "-q", "--no-edit", "--no-verify", fetched
        )
        if code != 0:
            repo.try_git("merge", "--abort")
            raise GitError(("merge", fetched), code, said)
        for line in said.splitlines():
            if line.startswith("oryxmem merge-driver:"):  # a true conflict, both kept
                log.warning("git sync: %s", line.removeprefix("oryxmem merge-driver: "))
        return True

    def _count(self, repo: Repo, fetched: str | None) -> None:
        if fetched is None:
            self.state.ahead, self.state.behind = 1, 0  # the branch is not there yet
            return
        counts = repo.git("rev-list", "--left-right", "--count", f"HEAD...{fetched}").split()
        self.state.ahead, self.state.behind = int(counts[0]), int(counts[1])


def _staged(repo: Repo, paths: list[str]) -> list[str]:
    names = repo.git("diff", "--cached", "--name-only", "--no-renames", "-z", "--", *paths)
    return [name for name in names.split("\0") if name]


def commit_message(numstat: str) -> str:
    """'oryxmem: coder +3 -1, (global) +1': each agent whose memory changed, in lines."""
    per: dict[str, list[int]] = {}
    for line in numstat.splitlines():
        added, removed, path = [*line.split("\t", 2), "", ""][:3]
        if not path.endswith(MEMORY_FILE) or not added.isdigit():
            continue
        parts = Path(path).parts
        agent = parts[-2] if "agents" in parts else "(global)"
        counts = per.setdefault(agent, [0, 0])
        counts[0] += int(added)
        counts[1] += int(removed)
    described = [
        f"{agent} +{added}" + (f" -{removed}" if removed else "")
        for agent, (added, removed) in sorted(per.items())
    ]
    return "oryxmem: " + (", ".join(described) if described else "memory tombstones")
