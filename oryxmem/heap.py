"""The process's heap: what was freed, given back to the system.

glibc keeps the memory a thread frees for the next allocation, in that thread's arena;
after a one-off peak (a model loaded, a large batch embedded, a large MEMORY.md parsed)
the daemon's resident size would stay at the peak for the rest of its life.
"""

from __future__ import annotations

import contextlib
import ctypes


def give_back_freed_memory() -> None:
    """Return the heap memory freed meanwhile to the system (glibc's malloc_trim)."""
    with contextlib.suppress(OSError, AttributeError):  # not glibc: it keeps what it keeps
        ctypes.CDLL("libc.so.6").malloc_trim(0)
