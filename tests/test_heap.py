"""The daemon's heap: what start-up built is kept out of the cyclic collector's way, and
what comes later is collected as before."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from oryxmem.heap import keep_startup_objects


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


@pytest.fixture
def frozen_heap() -> Iterator[None]:
    yield
    gc.unfreeze()  # the rest of the test run collects as usual


def tracked(value: object) -> bool:
    return any(o is value for o in gc.get_objects())


def test_objects_alive_at_start_up_are_not_walked_and_later_garbage_is_collected(
    frozen_heap: None,
) -> None:
    start_up = {"a cache": [("word", "stem")]}
    assert tracked(start_up)
    assert keep_startup_objects() >= 1
    assert not tracked(start_up)  # a full collection no longer walks it
    assert gc.get_freeze_count() >= 1

    later = {"built": ["after start-up"]}
    assert tracked(later)
    first, second = _Node(), _Node()
    first.other, second.other = second, first  # a cycle only the collector frees
    gone = weakref.ref(first)
    del first, second
    gc.collect()
    assert gone() is None
