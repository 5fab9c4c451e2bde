"""The journal of an agent's MEMORY.md: appends about to be written, and saves answered
but not yet in the rows, one record for both, beside the agent's lock.

Before each append one JSON line is added to ``run/locks/<agent lock>.answered`` and
synced: the writer's pid, where the append goes and what it writes (``intent``), and
the entries of the saves it carries. It is a write-ahead log for MEMORY.md:

- A save is answered once its record is synced and its append written to MEMORY.md
  (every reader sees it): one sync before the answer. MEMORY.md itself is synced when
  the rows take the saves in, within a second (``rows_have_answered``), or before
  anything else is written to it; the records are marked done then.
- A record not marked done is replayed at the next lock (a crash, a power cut): its
  append is finished if the disk kept only part of it, or written if it kept none, and
  left alone if it is complete or the file has been replaced or changed since.
- Should the process die before the rows have the saves *and* someone write an old copy
  of the file back meanwhile, the saves would be in neither place: what the rows lack
  of the records is put into the rows after a crash
  (``MemoryService.recover_answered``), and reconcile puts it back into MEMORY.md.

A record leaves once the rows hold its entries (``forget``). An append that answers no
save (a reconcile writing rows into the file) is synced at once and its record taken
out. A save written by a rewrite (a new file, entries not at the end) is noted after the
rewrite, with no intent. The caller holds the agent's file lock for every call.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from oryxmem.fileio import AppendIntent, FileStat, open_regular
from oryxmem.store.format import Entry

# Each record begins with this, so that the digit that says its append is done is at a
# known place: an append that completed is marked so with one byte written in place
# (not synced: a mark lost to a crash leaves a record whose append the repair finds
# complete), and a later reader tells a crash's torn append from an append that ended.
RECORD_HEAD = b'{"done": 0, '
DONE_AT = len(b'{"done": ')


def _entry_fields(entry: Entry) -> dict[str, object]:
    return {"scope": entry.scope, "ts": entry.ts, "content": entry.content, "id": entry.entry_id}


def _pid_of(line: bytes) -> int | None:
    try:
        record = json.loads(line)
    except ValueError:
        return None
    pid = record.get("pid") if isinstance(record, dict) else None
    return pid if isinstance(pid, int) else None


class AnsweredLog:
    def __init__(self, path: Path) -> None:
        self.path = path

    def note(self, entries: Sequence[Entry], intent: AppendIntent | None = None) -> int:
        """One record of these entries (and of the append about to carry them), synced
        before this returns; gives where it begins in the log."""
        record: dict[str, object] = {
            "pid": os.getpid(),
            "entries": [_entry_fields(e) for e in entries],
        }
        if intent is not None:
            record["intent"] = intent.to_fields()
        data = RECORD_HEAD + json.dumps(record)[1:].encode("ascii") + b"\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = open_regular(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600, one_link=True)
        try:
            start = os.fstat(fd).st_size  # the caller holds the lock: no one else appends
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fdatasync(fd)
            except OSError:
                os.ftruncate(fd, start)  # no half record for the next one to run into
                raise
            return start
        finally:
            os.close(fd)

    def mark_done(self, start: int) -> None:
        """The append of the record at ``start`` is durable (see RECORD_HEAD)."""
        fd = open_regular(self.path, os.O_WRONLY, one_link=True)
        try:
            os.pwrite(fd, b"1", start + DONE_AT)
        finally:
            os.close(fd)

    def take_back(self, start: int, *, sync: bool) -> None:
        """Cut the log back to ``start``, the record written there and all after it: an
        append taken back (synced: its saves were refused, recovery must not find
        them), or one that answered no save and is done (not synced)."""
        fd = open_regular(self.path, os.O_WRONLY, one_link=True)
        try:
            os.ftruncate(fd, start)
            if sync:
                os.fdatasync(fd)
        finally:
            os.close(fd)

    def stat(self) -> FileStat | None:
        try:
            return FileStat.of(os.stat(self.path))
        except FileNotFoundError:
            return None

    def records(self) -> list[dict[str, object]]:
        """What is noted (a line a crash cut short is no record). A record of an older
        oryxmem (one entry a line) reads as a record of that one entry."""
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
            if not isinstance(record, dict):
                continue
            if isinstance(record.get("entries"), list):
                found.append(record)
            elif isinstance(record.get("content"), str):
                found.append({"done": 1, "pid": record.get("pid"), "entries": [record]})
        return found

    def open_intents(self) -> list[AppendIntent]:
        """The appends of the records not marked done, in the order they were written: a
        crash may have torn the last, and the disk may have lost any of those written
        without a sync since the last was marked (appends are written one at a time,
        under the lock)."""
        intents = []
        for record in self.records():
            if not record.get("done"):
                intent = AppendIntent.from_fields(record.get("intent"))
                if intent is not None:
                    intents.append(intent)
        return intents

    def mark_done_of(self, pid: int) -> None:
        """Every record of this process is done: the appends it wrote are durable."""
        try:
            fd = open_regular(self.path, os.O_RDWR, one_link=True)
        except FileNotFoundError:
            return
        try:
            raw = os.pread(fd, os.fstat(fd).st_size, 0)
            start = 0
            for line in raw.split(b"\n"):
                if line.startswith(RECORD_HEAD) and _pid_of(line) == pid:
                    os.pwrite(fd, b"1", start + DONE_AT)
                start += len(line) + 1
        finally:
            os.close(fd)

    def entries(self) -> list[Entry]:
        found = []
        for record in self.records():
            noted = record["entries"]
            assert isinstance(noted, list)  # records() keeps only those
            for e in noted:
                if isinstance(e, dict) and isinstance(e.get("content"), str):
                    ts = e.get("ts")
                    found.append(
                        Entry(
                            str(e.get("scope")),
                            ts if isinstance(ts, str) else None,
                            e["content"],
                            str(e.get("id")),
                        )
                    )
        return found

    def forget(self, pid: int | None = None) -> None:
        """Take out this process's records (``pid``), or every one (None)."""
        records = self.records()
        kept = [r for r in records if pid is not None and r.get("pid") != pid]
        if len(kept) == len(records):
            return
        # In place, under the caller's lock (no temp file a kill could leave behind): the
        # kept records first, then the end cut; a crash between leaves records of saves
        # the rows have, which recovery finds there already.
        data = "".join(json.dumps(r) + "\n" for r in kept).encode("ascii")
        fd = open_regular(self.path, os.O_WRONLY, one_link=True)
        try:
            if data:
                os.pwrite(fd, data, 0)
            os.ftruncate(fd, len(data))
            os.fdatasync(fd)
        finally:
            os.close(fd)
