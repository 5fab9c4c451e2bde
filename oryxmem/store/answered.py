"""Saves answered but not yet in the rows: a small log per agent, beside its lock.

A save is answered once it is durable in MEMORY.md; its row (and the history that
protects it from a stale editor buffer) follows a few milliseconds later. Should the
process die in between *and* someone write an old copy of the file back meanwhile, the
save would be in neither place. So each batch's entries are also written, fsynced,
to ``run/locks/<agent lock>.answered`` before the answer, one JSON line each with the
writer's pid, and taken out once the rows hold them. After a crash, what the rows lack
of it is put into the rows (``MemoryService.recover_answered``), and reconcile puts it
back into MEMORY.md if the file lost it. The caller holds the agent's file lock.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from oryxmem.fileio import open_regular
from oryxmem.store.format import Entry


class AnsweredLog:
    def __init__(self, path: Path) -> None:
        self.path = path

    def add(self, entries: Sequence[Entry]) -> None:
        """Note these entries, durably (before their saves are answered)."""
        if not entries:
            return
        pid = os.getpid()
        data = "".join(
            json.dumps(
                {"pid": pid, "scope": e.scope, "ts": e.ts, "content": e.content, "id": e.entry_id},
                ensure_ascii=False,
            )
            + "\n"
            for e in entries
        ).encode("utf-8")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = open_regular(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600, one_link=True)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fdatasync(fd)
        finally:
            os.close(fd)

    def records(self) -> list[dict[str, object]]:
        """What is noted (a line a crash cut short is no record)."""
        try:
            fd = open_regular(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return []
        with os.fdopen(fd, "rb") as handle:
            raw = handle.read()
        found = []
        for line in raw.decode("utf-8", errors="replace").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and isinstance(record.get("content"), str):
                found.append(record)
        return found

    def entries(self) -> list[Entry]:
        return [
            Entry(str(r.get("scope")), r.get("ts"), str(r["content"]), str(r.get("id")))  # type: ignore[arg-type]
            for r in self.records()
        ]

    def forget(self, pid: int | None = None) -> None:
        """Take out this process's records (``pid``), or every one (None)."""
        records = self.records()
        kept = [r for r in records if pid is not None and r.get("pid") != pid]
        if len(kept) == len(records):
            return
        # In place, under the caller's lock (no temp file a kill could leave behind): the
        # kept records first, then the end cut; a crash between leaves records of saves
        # the rows have, which recovery finds there already.
        data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in kept).encode("utf-8")
        fd = open_regular(self.path, os.O_WRONLY, one_link=True)
        try:
            if data:
                os.pwrite(fd, data, 0)
            os.ftruncate(fd, len(data))
            os.fdatasync(fd)
        finally:
            os.close(fd)
