"""``oryxmem merge-driver BASE OURS THEIRS PATH``: what git runs for ``merge=oryxmem``.

A MEMORY.md is merged by entry (merge.py), dropping what the TOMBSTONES beside it name;
a TOMBSTONES file is merged as the union of its versions. The result goes into OURS
(git's %A) and the driver exits 0: never conflict markers. A true conflict (a core entry
rewritten differently on both sides) keeps both versions and is recorded in
``.oryxos/run/merge-conflicts.jsonl``, where ``oryxmem status`` and the daemon's log
show it until one of the two is removed. A version that cannot be merged by entry (it
has conflict markers already) exits 1 with OURS untouched: git reports a conflict.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from oryxmem.fileio import atomic_write
from oryxmem.store import tombstones
from oryxmem.store.format import parse
from oryxmem.sync.merge import Conflict, MergeRefused, merge_memory

CONFLICTS_FILE = "merge-conflicts.jsonl"


def _read(path: Path) -> str:
    return path.read_bytes().decode("utf-8", errors="surrogateescape")


def run_driver(base: Path, ours: Path, theirs: Path, where: str) -> tuple[int, str]:
    """Merge one file as git asked; (exit code, what to tell the person)."""
    target = Path(where)
    if target.name == tombstones.FILE_NAME:
        merged = tombstones.merge_texts(_read(base), _read(ours), _read(theirs))
        atomic_write(ours, merged.encode("utf-8"))
        return 0, ""
    stones = tombstones.Tombstones(target.with_name(tombstones.FILE_NAME)).read()
    try:
        result = merge_memory(_read(base), _read(ours), _read(theirs), stones)
    except MergeRefused as refused:
        return 1, f"oryxmem merge-driver: {where}: {refused}; resolve it by hand"
    atomic_write(ours, result.text.encode("utf-8", errors="surrogateescape"))
    if not result.conflicts:
        return 0, ""
    record_conflicts(target, result.conflicts)
    lines = [
        f"oryxmem merge-driver: {where}: the core entry of {c.ts} was rewritten on both"
        f" sides; both versions are kept: {c.ours!r} and {c.theirs!r} (remove one)"
        for c in result.conflicts
    ]
    return 0, "\n".join(lines)


def workspace_os_dir(path: Path) -> Path | None:
    """The .oryxos folder a memory file's path is in."""
    for folder in path.resolve().parents:
        if folder.name == ".oryxos":
            return folder
    return None


def record_conflicts(path: Path, conflicts: list[Conflict]) -> None:
    os_dir = workspace_os_dir(path)
    if os_dir is None:
        return
    run = os_dir / "run"
    run.mkdir(parents=True, exist_ok=True)
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with open(run / CONFLICTS_FILE, "a", encoding="utf-8") as out:
        for conflict in conflicts:
            record = {"at": at, "path": str(path.resolve()), **asdict(conflict)}
            out.write(json.dumps(record, ensure_ascii=False) + "\n")


def outstanding_conflicts(os_dir: Path) -> list[dict[str, Any]]:
    """The recorded conflicts whose two versions are both still in their file."""
    return list(_outstanding(os_dir / "run" / CONFLICTS_FILE))


def _outstanding(records: Path) -> Iterator[dict[str, Any]]:
    try:
        text = records.read_text(encoding="utf-8")
    except FileNotFoundError:
        return
    cache: dict[str, set[tuple[str | None, str]]] = {}
    for line in text.splitlines():
        try:
            record = json.loads(line)
            path = str(record["path"])
        except (ValueError, KeyError, TypeError):
            continue
        if path not in cache:
            try:
                doc = parse(Path(path).read_text(encoding="utf-8"))
            except OSError:
                doc = parse("")
            cache[path] = {(e.ts, e.content) for e in doc.core}
        present = cache[path]
        if (record.get("ts"), record.get("ours")) in present and (
            record.get("ts"),
            record.get("theirs"),
        ) in present:
            yield record


class ConflictTeller:
    """Says each conflict the merge driver recorded once, in the daemon's log, whoever ran
    the merge (the sync loop, a person's git pull): looked for after each reconcile."""

    def __init__(self, os_dir: Path) -> None:
        self.path = os_dir / "run" / CONFLICTS_FILE
        self._told = self._size()

    def _size(self) -> int:
        try:
            return self.path.stat().st_size
        except FileNotFoundError:
            return 0

    def new_lines(self) -> list[str]:
        size = self._size()
        if size == self._told:
            return []
        if size < self._told:
            self._told = 0  # the file was started afresh
        with open(self.path, "rb") as records:
            records.seek(self._told)
            fresh = records.read(size - self._told).decode("utf-8", errors="replace")
        self._told = size
        said = []
        for line in fresh.splitlines():
            try:
                record = json.loads(line)
                said.append(
                    f"{record['path']}: the core entry of {record['ts']} was rewritten on both"
                    f" sides; both versions are kept: {record['ours']!r} and"
                    f" {record['theirs']!r} (remove one)"
                )
            except (ValueError, KeyError, TypeError):
                continue
        return said
