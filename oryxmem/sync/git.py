"""Is git in the middle of an operation on this workspace? Then nothing is written."""

from __future__ import annotations

from pathlib import Path

# Present while git rewrites the work tree or waits for a human to finish.
BUSY_MARKERS = (
    "index.lock",
    "MERGE_HEAD",
    "rebase-merge",
    "rebase-apply",
    "CHERRY_PICK_HEAD",
    "REVERT_HEAD",
)


def find_git_dir(start: Path) -> Path | None:
    """The .git directory of the repository holding start (following a .git file)."""
    for folder in (start, *start.parents):
        candidate = folder / ".git"
        if candidate.is_dir():
            return candidate
        if candidate.is_file():
            text = candidate.read_text(encoding="utf-8", errors="replace").strip()
            if text.startswith("gitdir:"):
                target = Path(text.split(":", 1)[1].strip())
                return target if target.is_absolute() else (folder / target).resolve()
    return None


def git_operation_in_progress(root: Path) -> str | None:
    """The marker that shows git is busy here (e.g. 'MERGE_HEAD'), or None."""
    git_dir = find_git_dir(root)
    if git_dir is None:
        return None
    for marker in BUSY_MARKERS:
        if (git_dir / marker).exists():
            return marker
    return None
