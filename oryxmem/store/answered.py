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
import stat
from collections.abc import Collection, Sequence
from pathlib import Path

from oryxmem.fileio import AppendIntent, FileStat, open_regular
from oryxmem.store.format import Entry

# Each record begins with this, so that the digit that says its append is done is at a
# known place: an append that completed is marked so with one byte written in place
# (not synced: a mark lost to a crash leaves a record whose append the repair finds
# complete), and a later reader tells a crash's torn append from an append that ended.
RECORD_HEAD = b'{"done": 0, '
DONE_AT = len(b'{"done": ')
# Zeros written ahead of the records, so that a record is written over blocks the file
# has (see note); and the size past which a forget gives the space back.
GROW_BYTES = 64 * 1024
SHRINK_ABOVE_BYTES = 16 * GROW_BYTES


def _entry_fields(entry: Entry) -> dict[str, object]:
    return {"scope": entry.scope, "ts": entry.ts, "content": entry.content, "id": entry.entry_id}


def _holds_any(record: dict[str, object], ids: Collection[str]) -> bool:
    entries = record.get("entries")
    return (
        bool(ids)
        and isinstance(entries, list)
        and any(isinstance(e, dict) and e.get("id") in ids for e in entries)
    )


def _pid_of(line: bytes) -> int | None:
    try:
        record = json.loads(line)
    except ValueError:
        return None
    pid = record.get("pid") if isinstance(record, dict) else None
    return pid if isinstance(pid, int) else None


def _used(fd: int) -> bytes:
    """The log's records: its bytes up to the zeros written ahead of them."""
    raw = os.pread(fd, os.fstat(fd).st_size, 0)
    cut = raw.find(b"\0")
    return raw if cut < 0 else raw[:cut]


def _write_at(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


class AnsweredLog:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._end: int | None = None  # where this process last left the end of the records
        # The log kept open between records (saves come one after another), and which
        # file it is (inode, device): used while the path still names that file.
        self._fd: int | None = None
        self._held: tuple[int, int] | None = None

    def _end_of_records(self, fd: int) -> int:
        """Where the next record goes: after the last whole one (a record a crash cut
        short is written over). The end this process left is still the end while a
        newline ends the records there and zeros (or the file's end) follow; another
        process's record or forget changes that."""
        end = self._end
        if end is not None:
            probe = os.pread(fd, 2, end - 1) if end else b"\n" + os.pread(fd, 1, 0)
            if probe in (b"\n", b"\n\0"):
                return end
        return _used(fd).rfind(b"\n") + 1

    def note(self, entries: Sequence[Entry], intent: AppendIntent | None = None) -> int:
        """One record of these entries (and of the append about to carry them), synced
        before this returns; gives where it begins in the log.

        Records are written over zeros written ahead of them (GROW_BYTES at a time), so
        that the sync of a record writes data blocks alone: the file's size and blocks
        stay as they were, and the filesystem commits no metadata for it."""
        record: dict[str, object] = {
            "pid": os.getpid(),
            "entries": [_entry_fields(e) for e in entries],
        }
        if intent is not None:
            record["intent"] = intent.to_fields()
        data = RECORD_HEAD + json.dumps(record)[1:].encode("ascii") + b"\n"
        fd, size = self._writable()
        start = self._end_of_records(fd)  # the caller holds the lock: no one else writes
        ahead = start + len(data) > size
        try:
            _write_at(fd, data + bytes(GROW_BYTES) if ahead else data, start)
            os.fdatasync(fd)
        except OSError:
            try:
                os.pwrite(fd, bytes(len(data)), start)  # no half record to run into
            finally:
                self.close()
            raise
        self._end = start + len(data)
        return start

    def _writable(self) -> tuple[int, int]:
        """The log open for writing, and its size now: the file kept open since the last
        record while the path still names it (the same regular file, one link), else
        opened anew (one stat a record instead of an open, its checks and a close)."""
        if self._fd is not None:
            try:
                info: os.stat_result | None = os.lstat(self.path)
            except OSError:  # gone, or not to be looked at: opening it says which
                info = None
            if (
                info is not None
                and (info.st_ino, info.st_dev) == self._held
                and stat.S_ISREG(info.st_mode)
                and info.st_nlink == 1
            ):
                return self._fd, info.st_size
            self.close()
        fd = self._open(os.O_RDWR | os.O_CREAT)
        info = os.fstat(fd)
        self._fd, self._held = fd, (info.st_ino, info.st_dev)
        return fd, info.st_size

    def close(self) -> None:
        """Let go of the file kept open for records."""
        fd, self._fd, self._held = self._fd, None, None
        if fd is not None:
            os.close(fd)

    def _open(self, flags: int) -> int:
        try:
            return open_regular(self.path, flags, 0o600, one_link=True)
        except FileNotFoundError:
            if not flags & os.O_CREAT:
                raise
            self.path.parent.mkdir(parents=True, exist_ok=True)
            return open_regular(self.path, flags, 0o600, one_link=True)

    def mark_done(self, start: int) -> None:
        """The append of the record at ``start`` is durable (see RECORD_HEAD)."""
        fd = self._open(os.O_WRONLY)
        try:
            os.pwrite(fd, b"1", start + DONE_AT)
        finally:
            os.close(fd)

    def take_back(self, start: int, *, sync: bool) -> None:
        """Take back the record at ``start`` and all after it (zeros over them): an
        append taken back (synced: its saves were refused, recovery must not find
        them), or one that answered no save and is done (not synced)."""
        fd = self._open(os.O_RDWR)
        try:
            os.pwrite(fd, bytes(len(_used(fd)) - start), start)
            if sync:
                os.fdatasync(fd)
            self._end = start
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
        try:
            raw = _used(fd)
        finally:
            os.close(fd)
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
            fd = self._open(os.O_RDWR)
        except FileNotFoundError:
            return
        try:
            start = 0
            for line in _used(fd).split(b"\n"):
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

    def forget(self, pid: int | None = None, keep: Collection[str] = ()) -> None:
        """Take out this process's records (``pid``), or every one (None); but not a record
        holding an entry whose id is in ``keep`` (a save whose rows are not in yet)."""
        records = self.records()
        kept = [
            r for r in records if pid is not None and (r.get("pid") != pid or _holds_any(r, keep))
        ]
        if len(kept) == len(records):
            return
        # In place, under the caller's lock (no temp file a kill could leave behind): the
        # kept records over the first ones, zeros over the rest; a crash between leaves
        # records of saves the rows have, which recovery finds there already.
        data = "".join(json.dumps(r) + "\n" for r in kept).encode("ascii")
        fd = self._open(os.O_RDWR)
        try:
            used, size = len(_used(fd)), os.fstat(fd).st_size
            if size > SHRINK_ABOVE_BYTES:  # a burst's records are gone: give the space back
                os.ftruncate(fd, len(data))
                used = len(data) + GROW_BYTES
            _write_at(fd, data + bytes(max(used - len(data), 0)), 0)
            os.fdatasync(fd)
            self._end = len(data)
        finally:
            os.close(fd)
