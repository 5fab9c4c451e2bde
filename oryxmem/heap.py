"""The process's heap: what was freed, given back to the system, in few arenas, and
what start-up built, kept out of the cyclic collector's way.

glibc keeps the memory a thread frees for the next allocation, in that thread's arena;
after a one-off peak (a model loaded, a large batch embedded, a large MEMORY.md parsed)
the daemon's resident size would stay at the peak for the rest of its life. And each
thread that allocates gets an arena of its own (up to eight per core): what one frees
another cannot use.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc


def give_back_freed_memory() -> None:
    """Return the heap memory freed meanwhile to the system (glibc's malloc_trim)."""
    with contextlib.suppress(OSError, AttributeError):  # not glibc: it keeps what it keeps
        ctypes.CDLL("libc.so.6").malloc_trim(0)


M_ARENA_MAX = -8  # mallopt's parameter (malloc.h)
DAEMON_ARENAS = 2


def share_arenas(count: int = DAEMON_ARENAS) -> None:
    """At most ``count`` malloc arenas for all the process's threads (glibc's mallopt;
    MALLOC_ARENA_MAX does the same from the environment). Called before the first thread
    starts: glibc fixes the limit when a thread first needs an arena of its own. The
    daemon's threads take turns at the interpreter, so they hardly contend for an arena;
    in one they reuse each other's freed memory (at 100,000 entries its resident size
    was 10 to 20 MB lower, and steadier)."""
    with contextlib.suppress(OSError, AttributeError):  # not glibc: its own arenas
        ctypes.CDLL("libc.so.6").mallopt(M_ARENA_MAX, count)


def keep_startup_objects() -> int:
    """Put every object alive now out of the cyclic collector's reach for good
    (gc.freeze); gives how many. For a long-lived process, once its modules are loaded
    and before it reads any data: what it builds later, and may drop, is collected as
    before (a frozen object is never collected, so nothing that may become garbage
    should be alive now).

    A full collection walks every object the collector tracks, and everything they
    hold. The modules, their functions and their caches live as long as the process:
    the stemmer's cache alone holds 65,536 words, about 200,000 references. Walked at
    each full collection (about once a second while saves stream in), they cost the
    daemon 22 to 35 ms in which none of its threads ran Python, and the saves and
    searches of that moment waited; with them frozen, 6 to 10 ms. A cache frozen while
    still empty is not walked however much it holds later. What the imports left as
    garbage is collected first, so none of it is kept."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
