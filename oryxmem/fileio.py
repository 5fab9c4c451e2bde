"""Durable file writes: atomic replace, fsync'd appends, and the lock that guards them.

A rewrite goes to a temp file in the same directory, is fsynced, replaces the
original with ``os.replace`` and the directory is fsynced, keeping the mode.
An append in place is first written, synced, into an intent journal given by the
caller (for MEMORY.md, the log of answered saves beside its lock: one record is
both), so that a line torn by a crash is repaired from that record at the next
lock instead of being read as an entry.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import stat
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Protocol, TypeVar

from oryxmem.errors import OryxError, StorageError

T = TypeVar("T")


class FileStat(NamedTuple):
    """Which file a path names and how it was when looked at: what tells a change.

    The ctime moves on every write, rename or chmod and cannot be set back, so
    two equal stats mean the same bytes in practice."""

    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, info: os.stat_result) -> FileStat:
        return cls(info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a device",
    stat.S_IFBLK: "a device",
    stat.S_IFLNK: "a symbolic link",
}


def open_regular(
    path: str | os.PathLike[str],
    flags: int,
    mode: int = 0o600,
    *,
    refuse: type[OryxError] = StorageError,
    one_link: bool = False,
) -> int:
    """os.open for a file oryxmem reads or writes in its own folders: never through a
    symbolic link, never blocking on a FIFO, never on anything but a regular file (and
    with ``one_link``, never on a file with another hard link, which could be anywhere).
    Anything else is ``refuse`` with the reason; a missing file is FileNotFoundError."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except FileNotFoundError:
        raise
    except PermissionError as error:  # as much the file's problem as a link in its place
        wanted = "read" if flags & (os.O_WRONLY | os.O_RDWR) == 0 else "write"
        raise refuse(
            f"{path}: permission denied to {wanted} it; oryxmem needs to read and write it",
            data={"errno": error.errno},
        ) from None
    except OSError as error:
        kind = _kind_at(path)
        if kind is None:
            raise storage_error("open", Path(path), error) from error
        raise refuse(f"{path} is {kind}, not a regular file; oryxmem leaves it alone") from None
    info = os.fstat(fd)
    problem = None
    if not stat.S_ISREG(info.st_mode):
        problem = f"is {_KINDS.get(stat.S_IFMT(info.st_mode), 'not a file')}, not a regular file"
    elif one_link and info.st_nlink > 1:
        problem = f"has {info.st_nlink} hard links (another name could be anywhere)"
    if problem is not None:
        os.close(fd)
        raise refuse(f"{path} {problem}; oryxmem leaves it alone")
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return fd


def _kind_at(path: str | os.PathLike[str]) -> str | None:
    """What is at path when it is not a regular file (None: a regular file, or nothing)."""
    try:
        kind = stat.S_IFMT(os.lstat(path).st_mode)
    except OSError:
        return None
    return _KINDS.get(kind)


def file_stat(path: str | os.PathLike[str]) -> FileStat | None:
    """The file's stat as oryxmem compares it; None: there is no file."""
    try:
        return FileStat.of(os.stat(path))
    except FileNotFoundError:
        return None


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def storage_error(action: str, path: Path, error: OSError) -> StorageError:
    reason = os.strerror(error.errno) if error.errno else str(error)
    return StorageError(f"could not {action} {path}: {reason}", data={"errno": error.errno})


def current_umask() -> int:
    """The process's umask, read without changing it (Linux says it in /proc)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass  # no /proc: ask the only other way, which sets it back at once
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# A look through /proc costs a stat of every file every process holds open (milliseconds
# on a workstation), and one save asks up to three times (is its file free? before the
# write, and while it waits for quiet). A look that found no such writer is taken again
# for a file whose stat has not moved, for this long after it began: a writer that
# opened the file within it is missed as one that opened it during the look itself is.
# A writer found is looked for again each time (it may have closed the file since).
NO_WRITER_ANSWER_SECONDS = 0.01


class _Look(NamedTuple):
    identity: tuple[int, int, int, int, int]  # dev, inode, size, mtime_ns, ctime_ns
    began: float  # time.monotonic()


class _Latest:
    look: _Look | None = None  # replaced whole, so threads read one look or the other


_NO_WRITER = _Latest()  # the latest look that found none


def held_open_to_write_elsewhere(info: os.stat_result) -> bool:
    """Does another process hold this file open to write at its own offset (O_WRONLY or
    O_RDWR without O_APPEND), as an editor writing it again in pieces does? Such a writer
    would write over an append, or into the inode a rename orphans; one with O_APPEND
    (``>>``, oryxmem itself) only adds at the end. Asks /proc: where there is none, or a
    process is not ours to look at, that process is not seen (the quiet time still is).
    No again within NO_WRITER_ANSWER_SECONDS of a look that said no, for the same stat."""
    identity = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
    now = time.monotonic()
    last = _NO_WRITER.look
    if last and last.identity == identity and now - last.began < NO_WRITER_ANSWER_SECONDS:
        return False
    held = _held_open_in_proc((info.st_dev, info.st_ino))
    if not held:
        _NO_WRITER.look = _Look(identity, now)
    return held


def _held_open_in_proc(target: tuple[int, int]) -> bool:
    me = str(os.getpid())
    try:
        pids = [pid for pid in os.listdir("/proc") if pid.isdigit() and pid != me]
    except OSError:
        return False
    for pid in pids:
        fds = f"/proc/{pid}/fd"
        try:
            names = os.listdir(fds)
        except OSError:
            continue  # gone, or not ours
        for name in names:
            try:
                held = os.stat(f"{fds}/{name}")
            except OSError:
                continue
            if (held.st_dev, held.st_ino) == target and _writes_in_place(pid, name):
                return True
    return False


def _writes_in_place(pid: str, fd: str) -> bool:
    try:
        with open(f"/proc/{pid}/fdinfo/{fd}", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("flags:"):
                    flags = int(line.split()[1], 8)
                    return flags & os.O_ACCMODE != os.O_RDONLY and not flags & os.O_APPEND
    except (OSError, ValueError):
        pass  # closed meanwhile
    return False


QUIET_POLL_SECONDS = 0.05  # how often wait_until_quiet looks at the file again


def wait_until_quiet(path: Path, inode: int, quiet: float, patience: float) -> FileStat | None:
    """Wait (at most ``patience`` s) until nothing has written the file ``inode`` for
    ``quiet`` s and no other process holds it open to write in place: an editor that
    truncates it and writes it again in small pieces may be mid-way. Stops too once the
    path names another file (replaced: the caller reads it again). Returns its stat then
    (None: no file)."""
    deadline = time.monotonic() + patience
    while True:
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return None
        age = time.time() - info.st_mtime
        left = deadline - time.monotonic()
        if left <= 0 or info.st_ino != inode or not is_being_written(info, quiet):
            return FileStat.of(info)
        time.sleep(min(max(quiet - age, 0.02), left, QUIET_POLL_SECONDS) + 0.001)


def is_being_written(info: os.stat_result, quiet: float) -> bool:
    """Is someone at work on this file: did it change less than ``quiet`` s ago, or does
    another process hold it open to write in place? (The one question; wait_until_quiet
    waits for its answer to be no.)"""
    return time.time() - info.st_mtime < quiet or held_open_to_write_elsewhere(info)


def atomic_write(
    path: Path,
    data: bytes,
    *,
    default_mode: int | None = None,
    before_replace: Callable[[], None] | None = None,
) -> os.stat_result:
    """Replace path with data so that a crash leaves either the old or the new bytes.

    The file keeps its mode; a new one gets ``default_mode``, or without it what the
    umask leaves of 0666 (as any program's new file would).

    ``before_replace`` runs once the temp file is durable and may raise (for
    instance ConcurrentChange) to abandon the write. Returns the stat of the new
    file. Any failure leaves the old file untouched and no temp file behind.
    """
    try:
        info = os.lstat(path)  # a link's target's mode is none of ours
        mode = stat.S_IMODE(info.st_mode) if stat.S_ISREG(info.st_mode) else None
    except FileNotFoundError:
        mode = None
    if mode is None:
        mode = default_mode if default_mode is not None else 0o666 & ~current_umask()
    tmp = path.with_name(f".{path.name}.{os.urandom(4).hex()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        try:
            os.fchmod(fd, mode)  # the umask must not narrow a mode we keep
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        if before_replace is not None:
            before_replace()
        os.replace(tmp, path)
    except OSError as error:
        _remove_quietly(tmp)
        raise storage_error("write", path, error) from error
    except BaseException:
        _remove_quietly(tmp)
        raise
    try:
        fsync_dir(path.parent)
        return os.stat(path)
    except OSError as error:
        raise storage_error("sync the directory of", path, error) from error


def _remove_quietly(path: Path) -> None:
    """Remove a temp file of ours; one that is already gone is what we wanted."""
    path.unlink(missing_ok=True)


def remove_stale_temp_files(directory: Path, name: str) -> list[Path]:
    """Temp files a crashed writer of ``name`` left behind; they are never the truth."""
    removed = []
    for candidate in directory.glob(f".{name}.*.tmp"):
        _remove_quietly(candidate)
        removed.append(candidate)
    return removed


@dataclass(frozen=True)
class AppendIntent:
    """What an in-place append is about to write, and where."""

    inode: int
    offset: int
    data: bytes

    def to_fields(self) -> dict[str, object]:
        """As a journal keeps it in a JSON record (bytes that are not UTF-8 kept exact)."""
        return {
            "inode": self.inode,
            "offset": self.offset,
            "data": self.data.decode("utf-8", errors="surrogateescape"),
            "crc32": zlib.crc32(self.data),
        }

    @classmethod
    def from_fields(cls, fields: object) -> AppendIntent | None:
        """The intent of a record; None for one that holds none, or a damaged one."""
        if not isinstance(fields, dict) or "data" not in fields:
            return None
        try:
            data = str(fields["data"]).encode("utf-8", errors="surrogateescape")
            intent = cls(int(fields["inode"]), int(fields["offset"]), data)
            crc = int(fields["crc32"])
        except (ValueError, KeyError, TypeError, UnicodeEncodeError):
            return None
        return intent if zlib.crc32(intent.data) == crc else None


def repair_torn_append(path: Path, intent: AppendIntent) -> str:
    """Finish an append a crash interrupted, or that never reached the disk (its bytes
    were written but not yet synced: the journal's record is what made it durable).
    Returns what was found, for the log."""
    try:
        fd = open_regular(path, os.O_RDWR, one_link=True)
    except FileNotFoundError:
        return "file gone"
    try:
        info = os.fstat(fd)
        if info.st_ino != intent.inode:
            return "file replaced since"
        end = intent.offset + len(intent.data)
        if info.st_size >= end and os.pread(fd, len(intent.data), intent.offset) == intent.data:
            return "complete"  # (appends after it may follow: theirs are looked at next)
        written = info.st_size - intent.offset
        if not 0 <= written < len(intent.data):
            return "file changed since"
        if os.pread(fd, written, intent.offset) != intent.data[:written]:
            return "file changed since"
        os.pwrite(fd, intent.data[written:], info.st_size)
        os.fsync(fd)
        if written == 0:  # the journal had it; the disk had none of it
            return f"wrote an append the disk had not kept ({len(intent.data)} bytes)"
        return f"repaired a torn line ({written} of {len(intent.data)} bytes were on disk)"
    finally:
        os.close(fd)


class FileLock:
    """An exclusive lock on a separate lock file, shared by threads and processes."""

    def __init__(self, lock_path: Path) -> None:
        self.lock_path = lock_path
        self._thread_lock = threading.Lock()
        self._fd: int | None = None
        self._stamp_fd: int | None = None

    def _open(self) -> int:
        if self._fd is None:
            self.lock_path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = open_regular(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600, one_link=True)
        return self._fd

    @contextmanager
    def hold(self) -> Iterator[FileLock]:
        with self._thread_lock:
            fd = self._open()
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                yield self
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)

    def note_written(self, key: FileStat) -> None:
        """Say which file this lock's writers left last (in a sidecar of the lock file):
        a writer that takes the lock is done when it lets go; one that does not (an
        editor) may be at work still, and is told apart by this."""
        assert self._fd is not None, "hold the lock first"
        if self._stamp_fd is None:
            self._stamp_fd = open_regular(
                self.lock_path.with_suffix(".written"), os.O_RDWR | os.O_CREAT, one_link=True
            )
        os.pwrite(self._stamp_fd, f"{' '.join(map(str, key))}\n".encode().ljust(80), 0)

    def last_written(self) -> FileStat | None:
        """The file a writer of this lock left last, if it said (see note_written)."""
        if self._stamp_fd is None:
            try:
                self._stamp_fd = open_regular(self.lock_path.with_suffix(".written"), os.O_RDWR)
            except FileNotFoundError:
                return None
        fields = os.pread(self._stamp_fd, 80, 0).split()
        try:
            return FileStat(*map(int, fields)) if len(fields) == 4 else None
        except ValueError:
            return None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._stamp_fd is not None:
            os.close(self._stamp_fd)
            self._stamp_fd = None


class AppendHandle:
    """A file kept open for appending, reopened whenever the path names another inode.

    Keeping it open saves an open and a close per save, and a close-after-write
    file event that every watcher of the directory would otherwise wake for.
    """

    def __init__(self, path: Path, refuse: type[OryxError] = StorageError) -> None:
        self.path = path
        self.refuse = refuse  # what a path that is no regular file raises
        self._fd: int | None = None

    def open_for(self, inode: int) -> tuple[int, os.stat_result]:
        """An fd on the file at path, and its stat; the caller has just seen the path name
        ``inode`` (under the lock). The kept fd serves only while it is that same file."""
        if self._fd is not None:
            info = os.fstat(self._fd)
            if info.st_ino == inode:
                return self._fd, info
        self.close()
        try:
            fd = open_regular(
                self.path, os.O_WRONLY | os.O_APPEND, refuse=self.refuse, one_link=True
            )
        except FileNotFoundError:
            raise ConcurrentChange(self.path) from None
        info = os.fstat(fd)
        if info.st_ino != inode:
            os.close(fd)
            raise ConcurrentChange(self.path)  # replaced since the caller looked
        self._fd = fd
        return fd, info

    def sync(self) -> None:
        """Make what was appended without a sync durable (in the inode appended to, even
        if the path names another file by now)."""
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self) -> None:
        """Close the kept fd. Bytes appended without a sync are left to the kernel: their
        journal records stay open, and a replay at the next lock finishes them if the
        disk lost them."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


class Journal(Protocol):
    """Where an append's intent is noted, durably, before the append is written."""

    def begin(self, intent: AppendIntent) -> None:
        """Note the intent (synced before this returns)."""

    def end(self) -> None:
        """The append begun is durable."""

    def withdraw(self) -> None:
        """The append begun was taken back: its intent is no more (synced)."""


def append_durably(
    handle: AppendHandle,
    inode: int,
    data: bytes,
    journal: Journal,
    expected_size: int,
    *,
    sync: bool = True,
) -> os.stat_result:
    """Append data at the end of the file (still ``inode`` of expected_size bytes); fsync.

    The caller holds the file's lock. The intent is journaled first, so a crash
    mid-write is repaired, never read as a torn entry. A failed write is taken
    back, so the file keeps its previous bytes.

    Without ``sync`` the journal's record is what makes the append durable: the bytes
    are written (every reader sees them) but not synced, and the journal is not told
    the append ended. The caller syncs later (``handle.sync()``) and then closes the
    record; until then a replay at the next lock finishes the append if a crash lost it.
    """
    path = handle.path
    try:
        fd, info = handle.open_for(inode)
        if info.st_size != expected_size:
            raise ConcurrentChange(path)
        intent = AppendIntent(info.st_ino, info.st_size, data)
        journal.begin(intent)
    except OSError as error:
        raise storage_error("append to", path, error) from error
    try:
        written = os.write(fd, data)
        if written != len(data):
            raise OSError(errno.ENOSPC, "short write")
        if sync:
            os.fsync(fd)
        result = os.fstat(fd)
    except OSError as error:
        _take_back(handle, fd, intent, journal)
        raise storage_error("append to", path, error) from error
    if sync:
        journal.end()
    return result


def _take_back(handle: AppendHandle, fd: int, intent: AppendIntent, journal: Journal) -> None:
    """Cut a failed append off again. If even that fails, the journal keeps the intent
    for the next lock holder to repair from, and the file is reopened then."""
    try:
        os.ftruncate(fd, intent.offset)
        os.fsync(fd)
        journal.withdraw()
    except OSError:
        handle.close()


class ConcurrentChange(Exception):
    """The file changed between reading it and writing it; read again and retry."""

    def __init__(self, path: Path) -> None:
        super().__init__(f"{path} changed while it was being written")
        self.path = path


def retry_on_change(
    attempts: int,
    work: Callable[[], T],
    before_retry: Callable[[], None] = lambda: None,
    *,
    patience: float = 0.0,
) -> T:
    """``work()``, tried again (after ``before_retry``) while another writer changes the
    file under it: ``attempts`` times, and for ``patience`` s at least. The last
    attempt's ConcurrentChange is the caller's to handle."""
    deadline = time.monotonic() + patience
    tried = 0
    while True:
        try:
            return work()
        except ConcurrentChange:
            tried += 1
            if tried >= attempts and time.monotonic() >= deadline:
                raise
            before_retry()


def raise_open_file_limit() -> int:
    """Lift this process's soft limit on open files to its hard limit; the new soft limit.

    A process that keeps every agent's lock file (and MEMORY.md) open needs more
    than the 1,024 a desktop session often starts with; the hard limit (usually
    far higher) is ours to take.
    """
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError) as error:  # keep going with what we have
            logging.getLogger("oryxmem").warning(
                "could not raise the open-file limit from %d to %d: %s", soft, wanted, error
            )
    return int(soft)
