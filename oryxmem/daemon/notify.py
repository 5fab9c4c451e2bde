"""sd_notify: tell systemd we are READY, our STATUS, that we are alive (WATCHDOG), STOPPING."""

from __future__ import annotations

import logging
import os
import socket

log = logging.getLogger("oryxmem.daemon")


def notify(message: str) -> bool:
    """Send one notification to $NOTIFY_SOCKET; False when not run by systemd, or when the
    manager no longer listens (a notification is advice: the daemon goes on without it)."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]  # an abstract socket
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.setblocking(False)  # a manager that stopped reading never stalls us
            sock.connect(address)
            sock.sendall(message.encode())
    except OSError as error:
        log.info("could not notify the service manager (%s): %s", address, error)
        return False
    return True


def watchdog_interval() -> float | None:
    """Half of systemd's WatchdogSec for this process, in seconds, if it asked for pings."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    return int(usec) / 2_000_000
