"""``oryxmem git setup``: make a clone merge memory by entry and keep secrets home.

Three things, each idempotent:

- ``.oryxos/.gitattributes`` (tracked, so every clone has it) names ``merge=oryxmem``
  for every MEMORY.md and TOMBSTONES file;
- the clone's own ``.git/config`` gets ``merge.oryxmem.driver``, the command git runs for
  them: this installation's interpreter by its full path with ``-P`` (launch.py), never
  a name looked up in PATH or a file in the folder git runs in. Config is not cloned,
  so every clone needs this once; ``status`` and the daemon's log say when it lacks it;
- a pre-commit hook (``oryxmem git pre-commit``) that refuses a commit adding a line that
  looks like a credential to a MEMORY.md, and writes the tombstones of the entries the
  commit removes. A hook that was there already is kept beside it and run after ours.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from oryxmem import secrets
from oryxmem.errors import OryxError
from oryxmem.launch import oryxmem_command
from oryxmem.store import tombstones
from oryxmem.store.format import parse
from oryxmem.sync.gitrepo import GitError, Repo
from oryxmem.workspace import MEMORY_FILE, Workspace

ATTRIBUTES = (
    "agents/*/MEMORY.md merge=oryxmem",
    "memory/MEMORY.md merge=oryxmem",
    "agents/*/TOMBSTONES merge=oryxmem",
    "memory/TOMBSTONES merge=oryxmem",
)
ATTRIBUTES_HEADER = "# Written by oryxmem git setup: memory merges by entry (oryxmem merge-driver)."
HOOK_MARK = "# oryxmem pre-commit hook"
CHAINED_SUFFIX = ".oryxmem-chained"


@dataclass
class SetupReport:
    done: list[str] = field(default_factory=list)  # what changed, one line each

    def __bool__(self) -> bool:
        return bool(self.done)


def driver_command() -> str:
    return f"{shlex.join(oryxmem_command('merge-driver'))} %O %A %B %P"


def setup(workspace: Workspace) -> SetupReport:
    repo = Repo.holding(workspace.root)
    report = SetupReport()
    if write_attributes(workspace):
        report.done.append(f"wrote {workspace.os_dir / '.gitattributes'} (merge=oryxmem)")
    wanted = {
        "merge.oryxmem.name": "oryxmem: MEMORY.md merged by entry",
        "merge.oryxmem.driver": driver_command(),
    }
    for key, value in wanted.items():
        code, now = repo.try_git("config", "--local", "--get", key)
        if code != 0 or now != value:
            repo.git("config", "--local", key, value)
            report.done.append(f"set {key} in {repo.git_path('config')}")
    hook = _install_hook(repo, workspace)
    if hook:
        report.done.append(hook)
    return report


def write_attributes(workspace: Workspace) -> bool:
    """merge=oryxmem for the memory files in .oryxos/.gitattributes (True: written)."""
    path = workspace.os_dir / ".gitattributes"
    try:
        before = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        before = ""
    ours = {line.split()[0] for line in ATTRIBUTES}
    kept = [
        line
        for line in before.splitlines()
        if not (line.split() and line.split()[0] in ours and "merge=" in line)
        and line.strip() != ATTRIBUTES_HEADER
        and not line.startswith("# Written by oryxmem init --git")
    ]
    after = "\n".join([*kept, ATTRIBUTES_HEADER, *ATTRIBUTES]).lstrip("\n") + "\n"
    if after == before:
        return False
    path.write_text(after, encoding="utf-8")
    return True


def hook_text(workspace: Workspace) -> str:
    command = shlex.join(oryxmem_command("--root", str(workspace.root), "git", "pre-commit"))
    return (
        "#!/bin/sh\n"
        f"{HOOK_MARK} (oryxmem git setup): no credential added to a MEMORY.md, and a\n"
        "# tombstone for each entry the commit removes. The hook that was here before is\n"
        f"# kept as pre-commit{CHAINED_SUFFIX} and runs after this one.\n"
        f"{command} || exit 1\n"
        f'if [ -x "$0{CHAINED_SUFFIX}" ]; then exec "$0{CHAINED_SUFFIX}" "$@"; fi\n'
    )


def _install_hook(repo: Repo, workspace: Workspace) -> str | None:
    path = repo.git_path("hooks/pre-commit")
    text = hook_text(workspace)
    try:
        before = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        before = None
    if before == text:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    said = f"installed the pre-commit hook {path}"
    if before is not None and HOOK_MARK not in before:
        chained = path.with_name(path.name + CHAINED_SUFFIX)
        os.replace(path, chained)
        said += f" (the one that was there runs after it, as {chained.name})"
    path.write_text(text, encoding="utf-8")
    path.chmod(0o755)
    return said


def driver_missing(workspace: Workspace) -> str | None:
    """Why this clone would not merge memory by entry (None: it would, or it is not in a
    git repository, or does not ask for merge=oryxmem)."""
    try:
        text = (workspace.os_dir / ".gitattributes").read_text(encoding="utf-8")
    except OSError:
        return None
    if "merge=oryxmem" not in text:
        return None
    try:
        repo = Repo.holding(workspace.root)
        code, now = repo.try_git("config", "--get", "merge.oryxmem.driver")
    except (OSError, GitError, OryxError):  # no git here: nothing to merge
        return None
    if code != 0 or not now:
        return "this clone has no merge.oryxmem.driver: run 'oryxmem git setup' once"
    return None


# --- the pre-commit hook ------------------------------------------------------------


def memory_pathspec(repo: Repo, workspace: Workspace) -> str:
    """Every MEMORY.md of the workspace, as a git pathspec (its ``*`` crosses folders)."""
    return f"{repo.relative(workspace.os_dir)}/*{MEMORY_FILE}"


def credentials_added(repo: Repo, *diff: str) -> list[str]:
    """What looks like a credential in the lines a diff adds to MEMORY.md files (the
    lines already there were checked when they came), each as 'PATH:LINE: KIND', with
    'COMMIT:' first for ``git log -p``. Only the added lines: a commit to a file of
    100,000 entries checks its few new lines, not the whole file."""
    added = repo.added_lines(*diff)
    said = []
    for finding in secrets.find([line.text for line in added]):
        line = added[finding.line - 1]
        where = f"{line.commit}:" if line.commit else ""
        said.append(f"{where}{line.path}:{line.number}: {finding.kind}")
    return said


def removed_in_commit(repo: Repo, path: str) -> list[tuple[str, str | None]]:
    """(id, time) of the entries HEAD's version of a MEMORY.md has and the staged one does not."""
    before = repo.show("HEAD", path)
    after = repo.show("", path)
    if before is None or after is None:
        return []
    kept = {entry.entry_id for entry in parse(after).all_entries()}
    return [(e.entry_id, e.ts) for e in parse(before).all_entries() if e.entry_id not in kept]


def tombstone_removals(repo: Repo, pathspec: str) -> list[str]:
    """Write (and stage) the tombstones of what the staged MEMORY.md files remove; gives
    the TOMBSTONES files it wrote. Only the files the commit deletes lines from are read."""
    written = []
    numstat = repo.git("diff", "--cached", "--numstat", "--no-renames", "--", pathspec)
    for line in numstat.splitlines():
        _, removed, path = [*line.split("\t", 2), "", ""][:3]
        if not removed.isdigit() or removed == "0":
            continue
        gone = removed_in_commit(repo, path)
        if not gone:
            continue
        target = repo.top / Path(path).with_name(tombstones.FILE_NAME)
        if tombstones.Tombstones(target).add(gone):
            repo.git("add", "--", repo.relative(target))
            written.append(repo.relative(target))
    return written
