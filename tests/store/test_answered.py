"""The answered log keeps its file open between records, and still writes each record
into the file its path names, and only into a regular file with one link."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from oryxmem.errors import StorageError
from oryxmem.store.answered import AnsweredLog
from oryxmem.store.format import Entry


def entry(text: str) -> Entry:
    return Entry("archival", "2026-12-06 10:00:00", text, f"id-{text}")


def noted(log: AnsweredLog) -> list[str]:
    return [e.content for e in log.entries()]


def open_fds_on(path: Path) -> int:
    """This process's descriptors on the file at path (both sides resolved, so a
    temporary folder reached through a link counts too)."""
    target = os.path.realpath(path)
    return sum(
        1 for fd in os.listdir("/proc/self/fd") if os.path.realpath(f"/proc/self/fd/{fd}") == target
    )


def test_records_one_after_another_go_through_one_open_file_and_read_back_in_order(
    tmp_path: Path,
) -> None:
    log = AnsweredLog(tmp_path / "agent.lock.answered")
    for text in ("one", "two", "three"):
        log.note([entry(text)])
    assert noted(log) == ["one", "two", "three"]
    assert open_fds_on(log.path) == 1
    log.close()
    assert open_fds_on(log.path) == 0


def test_a_record_another_process_wrote_between_ours_is_kept(tmp_path: Path) -> None:
    ours, theirs = AnsweredLog(tmp_path / "a.answered"), AnsweredLog(tmp_path / "a.answered")
    ours.note([entry("ours 1")])
    theirs.note([entry("theirs")])  # under the lock, after we let go of it
    ours.note([entry("ours 2")])
    assert noted(ours) == ["ours 1", "theirs", "ours 2"]


def test_a_log_removed_between_records_is_made_anew_at_its_path(tmp_path: Path) -> None:
    log = AnsweredLog(tmp_path / "a.answered")
    log.note([entry("before")])
    log.path.unlink()  # someone cleared run/locks
    log.note([entry("after")])
    assert noted(log) == ["after"]  # in the file the path names, not the removed one
    assert open_fds_on(log.path) == 1


def test_a_log_replaced_by_a_link_between_records_is_refused_and_its_target_untouched(
    tmp_path: Path,
) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("not ours\n")
    log = AnsweredLog(tmp_path / "a.answered")
    log.note([entry("before")])
    log.path.unlink()
    log.path.symlink_to(target)
    with pytest.raises(StorageError):
        log.note([entry("through the link")])
    assert target.read_text() == "not ours\n"


def test_a_second_hard_link_to_the_log_between_records_is_refused(tmp_path: Path) -> None:
    log = AnsweredLog(tmp_path / "a.answered")
    log.note([entry("before")])
    os.link(log.path, tmp_path / "another name")
    with pytest.raises(StorageError):
        log.note([entry("after")])
    assert noted(log) == ["before"]
