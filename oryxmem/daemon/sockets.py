"""The daemon's Unix socket: where it lives, binding it safely, adopting systemd's.

The socket is 0600 from birth (bound under a 0177 umask, never world-writable
for an instant) in a 0700 directory; a stale socket left by a crash is replaced,
a live one refused; systemd socket activation hands over fd 3.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
import struct
from pathlib import Path

from oryxmem.errors import DaemonAlreadyRunningError, InvalidConfigError

SD_LISTEN_FDS_START = 3


LISTEN_BACKLOG = 512  # connections the kernel holds before accept(): bursts of clients


def prepare_directory(folder: Path) -> None:
    """Create the socket's directory 0700. An existing one is never changed: it must be
    ours, or a shared sticky directory such as /tmp (the socket itself is 0600)."""
    if not folder.exists():
        folder.mkdir(mode=0o700, parents=True)
        os.chmod(folder, 0o700)  # whatever the umask
        return
    info = folder.stat()
    sticky_shared = bool(info.st_mode & stat.S_ISVTX)
    if info.st_uid != os.getuid() and not sticky_shared:
        raise InvalidConfigError(f"{folder} belongs to uid {info.st_uid}, not to you")


def is_live(path: Path) -> bool:
    """Does a process answer on this socket?"""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(str(path))
    except OSError as error:
        if error.errno in (errno.ECONNREFUSED, errno.ENOENT):
            return False
        raise
    finally:
        probe.close()
    return True


def bind(path: Path, backlog: int = LISTEN_BACKLOG) -> socket.socket:
    """A listening socket at path, 0600 from birth; a stale one is replaced."""
    prepare_directory(path.parent)
    if path.exists() or path.is_symlink():
        if not stat.S_ISSOCK(path.lstat().st_mode):
            raise InvalidConfigError(f"{path} exists and is not a socket; move it away")
        if is_live(path):
            raise DaemonAlreadyRunningError(f"a daemon already answers on {path}")
        path.unlink()  # stale: left by a daemon that died
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o177)
    try:
        sock.bind(str(path))
    finally:
        os.umask(old_umask)
    os.chmod(path, 0o600)
    sock.listen(backlog)
    return sock


def from_systemd() -> socket.socket | None:
    """The listening socket systemd passed us (socket activation), if any."""
    if os.environ.get("LISTEN_PID") != str(os.getpid()):
        return None
    count = int(os.environ.get("LISTEN_FDS", "0") or 0)
    for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        os.environ.pop(name, None)
    if count < 1:
        return None
    sock = socket.socket(fileno=SD_LISTEN_FDS_START)
    if sock.family != socket.AF_UNIX:
        raise InvalidConfigError("systemd passed a socket that is not a Unix socket")
    return sock


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end (SO_PEERCRED)."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", raw)
    return int(uid)
