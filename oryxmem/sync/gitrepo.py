"""Running git on the repository that holds a workspace: the one helper every git step
uses (setup, the merge driver's records, the hook, the sync loop).

git is found on PATH once and run by its full path, with a plain environment for what
it prints (no pager, no prompt for a password, C messages), so a background caller
never waits on a terminal.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from oryxmem.errors import NotARepositoryError

GIT_SECONDS = 120  # a fetch or a push over a slow link; nothing local takes this long


class GitError(Exception):
    """git failed: its own words in ``message``."""

    def __init__(self, args: tuple[str, ...], code: int, message: str) -> None:
        super().__init__(f"git {' '.join(args)}: {message or f'exit {code}'}")
        self.code = code
        self.message = message


def git_executable() -> str:
    found = shutil.which("git")
    if not found:
        raise NotARepositoryError("git is not installed (no git on PATH)")
    return found


def git_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        GIT_TERMINAL_PROMPT="0",
        GIT_PAGER="cat",
        LC_ALL="C",
        GIT_ASK_YESNO="false",
        GIT_MERGE_AUTOEDIT="no",
    )
    # GIT_DIR and GIT_INDEX_FILE stay: in a hook they name the index the commit is made
    # from (``git commit -a`` stages into a temporary one).
    return env


_HUNK_RE = re.compile(r"@@ -\d+(?:,\d+)? \+(\d+)")


class AddedLine(NamedTuple):
    commit: str  # the short id, for ``git log -p``; "" for a diff
    path: str
    number: int  # 1-based, in the file as the diff leaves it
    text: str


@dataclass(frozen=True)
class Repo:
    """The repository whose work tree holds the workspace."""

    top: Path

    @classmethod
    def holding(cls, path: Path) -> Repo:
        try:
            top = _run(path, "rev-parse", "--show-toplevel").strip()
        except GitError as error:
            raise NotARepositoryError(
                f"{path} is not in a git repository (git init first): {error.message}"
            ) from None
        return cls(Path(top))

    def git(self, *args: str) -> str:
        """git's output; GitError when it fails."""
        return _run(self.top, *args)

    def try_git(self, *args: str) -> tuple[int, str]:
        """Exit code and output (stdout, then stderr) of a git command allowed to fail."""
        done = _completed(self.top, args)
        return done.returncode, (done.stdout + done.stderr).strip()

    def added_lines(self, *diff: str) -> list[AddedLine]:
        """The lines a diff adds (``git diff``/``git log -p`` arguments, run with -U0),
        each with its file, its line number there and the commit it came in (log -p)."""
        out = self.git(*diff, "--unified=0", "--no-color", "--no-renames", "--no-ext-diff")
        added: list[AddedLine] = []
        commit = path = ""
        number = 0
        for line in out.split("\n"):
            if line.startswith("commit "):
                commit = line[7:19]
            elif line.startswith("+++ "):
                path = line[6:] if line.startswith("+++ b/") else ""
            elif line.startswith("@@"):
                match = _HUNK_RE.match(line)
                number = int(match.group(1)) if match else 0
            elif line.startswith("+") and path:
                added.append(AddedLine(commit, path, number, line[1:]))
                number += 1
        return added

    def relative(self, path: Path) -> str:
        return path.resolve().relative_to(self.top.resolve()).as_posix()

    def git_path(self, name: str) -> Path:
        """A path inside .git (hooks, MERGE_HEAD), as git resolves it (worktrees too)."""
        found = Path(self.git("rev-parse", "--git-path", name).strip())
        return found if found.is_absolute() else self.top / found

    def show(self, revision: str, path: str) -> str | None:
        """A file's text at a revision (``:path`` for the index), None when absent."""
        code, _ = self.try_git("cat-file", "-e", f"{revision}:{path}")
        if code != 0:
            return None
        return self.git("cat-file", "blob", f"{revision}:{path}")


def _completed(cwd: Path, args: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [git_executable(), *args],
        cwd=cwd,
        env=git_env(),
        capture_output=True,
        text=True,
        timeout=GIT_SECONDS,
        check=False,
    )


def _run(cwd: Path, *args: str) -> str:
    done = _completed(cwd, args)
    if done.returncode != 0:
        raise GitError(args, done.returncode, done.stderr.strip() or done.stdout.strip())
    return done.stdout
