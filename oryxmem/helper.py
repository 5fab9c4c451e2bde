"""A thread's own helper thread, for work split in two that it waits on.

The helper is made by the thread it helps, on that thread's first call, so it starts
at that thread's priority (Linux threads inherit their creator's niceness): the
daemon's indexer runs at nice 10 and its helper with it, a reader at the usual
priority and its helper too. A helper takes one task at a time; its thread goes when
the thread it helps does (its executor is collected with the thread's locals).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

_OWN = threading.local()


def own_helper() -> ThreadPoolExecutor:
    """The calling thread's helper (made now if it has none)."""
    helper: ThreadPoolExecutor | None = getattr(_OWN, "helper", None)
    if helper is None:
        helper = ThreadPoolExecutor(1, thread_name_prefix="oryxmem-helper")
        _OWN.helper = helper
    return helper
