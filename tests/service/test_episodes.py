"""Issue 12: episodic memory (rounds of past sessions), imports, and the block's third part."""

from __future__ import annotations

import json
import time
from datetime import date
from pathlib import Path

import pytest
from support.daemon import daemon
from support.processes import run_cli
from support.sync import wait_until

from oryxmem.client import Client
from oryxmem.config import Config, set_value
from oryxmem.errors import InvalidFieldError, TranscriptChangedError
from oryxmem.index.days import days_named
from oryxmem.index.episodes import ROUND_CHARS, USER_CHARS, EpisodeIndex, rounds
from oryxmem.prompt import EPISODES_HEADING
from oryxmem.service import MemoryService
from oryxmem.workspace import Workspace


def talk(service: MemoryService, agent: str, *pairs: tuple[str, str]) -> str:
    session = service.create_session(agent).id
    for user, reply in pairs:
        service.append_message(session, "user", user)
        service.append_message(session, "assistant", reply)
    return session


def test_a_round_is_a_user_message_and_its_replies_cut_to_size() -> None:
    messages = [
        {"role": "system", "content": "be brief", "at": "2026-11-01 09:00:00"},
        {"role": "user", "content": "x" * 5000, "at": "2026-11-01 09:00:01"},
        {"role": "assistant", "content": "first reply"},
        {"role": "tool", "content": "y" * 5000},
        {"role": "user", "content": "and   then?", "at": "2026-11-01 09:05:00"},
    ]
    made = rounds(messages)
    assert [r.number for r in made] == [0, 1, 2]
    assert made[0].text == "system: be brief"  # what came before the first user message
    assert made[1].at == "2026-11-01 09:00:01" and made[1].first_message == 1
    assert len(made[1].text) <= ROUND_CHARS and "first reply" in made[1].text
    assert made[1].text.splitlines()[0] == "user: " + "x" * (USER_CHARS - 1) + "…"
    assert made[2].text == "user: and then?"


def test_rounds_are_found_as_messages_are_appended_and_other_sessions_only_on_request(
    service: MemoryService,
) -> None:
    old = talk(service, "a", ("which database do we use?", "PostgreSQL 16 with pgvector"))
    now = talk(service, "a", ("hello", "hi"))
    hits = service.search_episodes("a", "what database is it")
    assert hits[0].session == old and "PostgreSQL" in hits[0].text and hits[0].round == 0
    # the last round grows: a reply appended later is found too
    service.append_message(now, "user", "and the cache?")
    assert not any("Redis" in h.text for h in service.search_episodes("a", "Redis cache"))
    service.append_message(now, "assistant", "Redis, on the same host")
    hit = service.search_episodes("a", "Redis cache")[0]
    assert hit.session == now and hit.round == 1 and "Redis" in hit.text
    assert all(h.session != now for h in service.search_episodes("a", "Redis cache", 5, now))
    assert service.search_episodes("b", "database") == []  # another agent's are not its


def test_the_days_a_question_names() -> None:
    assert days_named("What did Gina find on 1 February, 2023?") == {date(2023, 2, 1)}
    assert days_named("what did we decide on Oct 13th 2023 and on 2024-01-05") == {
        date(2023, 10, 13),
        date(2024, 1, 5),
    }
    assert days_named("the 3rd of March 2026") == {date(2026, 3, 3)}
    # no whole date, or none that exists
    assert days_named("what did we do in May 2023, or yesterday?") == set()
    assert days_named("on 31 February 2023, at 12 mayhem 2023") == set()


def test_a_round_beside_the_one_the_words_find_is_found_with_it(
    service: MemoryService,
) -> None:
    """The answer is often in a round beside the one that shares the question's words:
    the round after holds them as its context already, the round before only by this."""
    talk(
        service,
        "a",
        ("can you check the release?", "the version is 2.4.1, ready"),
        ("the deploy to staging failed again", "let me look at the logs"),
        ("what did you find?", "a missing environment variable, now set"),
    )
    talk(service, "a", ("what is for lunch?", "soup"))
    while service.episodes_step():
        pass
    words = EpisodeIndex(None, None)
    hits = words.search(service.index_db, "a", "why did the staging deploy fail", 5)
    assert [(h.round, h.arms) for h in hits] == [
        (1, ("keyword",)),
        (2, ("keyword",)),  # by its context column: the round before
        (0, ("neighbour",)),
    ]
    assert hits[2].score < hits[1].score < hits[0].score


def test_a_question_that_names_a_day_finds_what_was_said_that_day(
    service: MemoryService,
) -> None:
    for day, (user, reply) in (
        ("2026-10-02", ("the build is red", "a flaky test, retried")),
        ("2026-10-03", ("we chose a name for the project", "Kestrel it is")),
        ("2026-10-04", ("which name did we reject?", "Heron")),
    ):
        stamp = f"{day} 09:00:00"
        service.sessions.store.import_messages(
            "a",
            f"chat-{day}",
            [
                {"role": "user", "content": user, "at": stamp},
                {"role": "assistant", "content": reply, "at": stamp},
            ],
        )
    hits = service.search_episodes("a", "what did we settle on 3 October 2026?")
    assert "Kestrel" in hits[0].text and "day" in hits[0].arms
    assert all("day" not in h.arms for h in hits[1:])


def test_the_episode_index_is_derived_dropped_it_is_made_again(service: MemoryService) -> None:
    talk(service, "a", ("where is the staging server?", "staging runs on hetzner-2"))
    before = [(h.session, h.round, h.text) for h in service.search_episodes("a", "staging")]
    service.episodes.drop(service.index_db)
    assert service.index_summary()["episodes"]["pending"] == 1
    service.reindex()
    assert [(h.session, h.round, h.text) for h in service.search_episodes("a", "staging")] == before
    assert service.index_summary()["episodes"]["pending"] == 0


def dropped_with_another_connection(
    workspace: Workspace, service: MemoryService
) -> tuple[EpisodeIndex, MemoryService]:
    """A session's round said, the episode tables dropped, and a second service (another
    connection to the same database) to act meanwhile: the caller closes it."""
    talk(service, "a", ("where is the staging server?", "staging runs on hetzner-2"))
    index = service.episodes
    assert isinstance(index, EpisodeIndex)
    index.drop(service.index_db)
    return index, MemoryService(workspace, Config.load(workspace.config_path))


def test_a_step_whose_tables_another_connection_dropped_meanwhile_writes_nothing(
    workspace: Workspace, service: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reindex drops the tables while the indexer makes a step's rounds: that step
    writes nothing (and fails on nothing); the next makes them again and takes all in."""
    index, other = dropped_with_another_connection(workspace, service)
    real_take = index._take

    def take_while_a_reindex_drops(*args):  # type: ignore[no-untyped-def]
        made = real_take(*args)
        index.drop(other.index_db)
        return made

    monkeypatch.setattr(index, "_take", take_while_a_reindex_drops)
    try:
        assert index.catch_up(service.index_db) == 0
    finally:
        other.close()
    monkeypatch.undo()
    assert index.catch_up(service.index_db) == 1
    assert "hetzner-2" in service.search_episodes("a", "staging server")[0].text


def test_tables_another_connection_made_meanwhile_are_kept_and_read_whole(
    workspace: Workspace, service: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon's indexer and a search both find the tables missing at start: the one
    that writes second keeps what the first made (its rounds too), and a check that
    another thread's drop lands inside reads one state, not a table gone."""
    index, other = dropped_with_another_connection(workspace, service)
    real_is_current = index._is_current
    asked: list[bool] = []

    def stale_then_real(db):  # type: ignore[no-untyped-def]
        if not asked:  # the first check answered before the other connection made them
            asked.append(True)
            assert index.catch_up(other.index_db) == 1
            return False
        return real_is_current(db)

    monkeypatch.setattr(index, "_is_current", stale_then_real)
    try:
        index.ensure(service.index_db)
        monkeypatch.undo()
        assert index.pending(service.index_db) == 0  # the rounds the other took in are kept
        assert "hetzner-2" in service.search_episodes("a", "staging server")[0].text

        real_execute = type(service.db).execute
        dropped: list[bool] = []

        def drop_after_the_first_read(db, sql, *args):  # type: ignore[no-untyped-def]
            result = real_execute(db, sql, *args)
            if db is service.index_db and "sqlite_master" in sql and not dropped:
                dropped.append(True)
                index.drop(other.index_db)  # a reindex on another connection
            return result

        monkeypatch.setattr(type(service.db), "execute", drop_after_the_first_read)
        assert index._is_current(service.index_db)  # read in one snapshot: the tables it saw
        assert dropped
    finally:
        monkeypatch.undo()
        other.close()


def jsonl(path: Path, messages: list[dict[str, str]]) -> Path:
    path.write_text("".join(json.dumps(m) + "\n" for m in messages))
    return path


def claude_file(path: Path, session: str, turns: list[tuple[str, str]]) -> Path:
    lines = [{"type": "summary", "summary": "x", "leafUuid": "1"}]
    for n, (user, reply) in enumerate(turns):
        stamp = f"2026-10-0{n + 1}T08:00:00.000Z"
        lines.append(
            {
                "type": "user",
                "sessionId": session,
                "timestamp": stamp,
                "message": {"role": "user", "content": user},
            }
        )
        lines.append(
            {
                "type": "assistant",
                "sessionId": session,
                "timestamp": stamp,
                "message": {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "hidden"},
                        {"type": "text", "text": reply},
                        {"type": "tool_use", "id": "t", "name": "Bash", "input": {}},
                    ],
                },
            }
        )
        lines.append(
            {
                "type": "user",
                "sessionId": session,
                "timestamp": stamp,
                "message": {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "t", "content": "ok"}],
                },
            }
        )
        lines.append(
            {
                "type": "assistant",
                "sessionId": session,
                "isSidechain": True,
                "message": {"role": "assistant", "content": "a subagent"},
            }
        )
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_importing_jsonl_and_claude_code_transcripts_twice_adds_nothing(
    service: MemoryService, tmp_path: Path
) -> None:
    plain = jsonl(
        tmp_path / "chat.jsonl",
        [
            {"role": "user", "content": "what is the deploy command?", "ts": "2026-09-01 10:00:00"},
            {"role": "assistant", "content": "make deploy ENV=prod"},
        ],
    )
    project = tmp_path / "project"
    project.mkdir()
    claude_file(
        project / "abc.jsonl", "abc-123", [("fix the flaky login test", "retried the fixture")]
    )
    report = service.import_sessions([plain, project], "a")
    assert [r["added"] for r in report] == [2, 2]
    assert [r["kind"] for r in report] == ["jsonl", "claude-code"]
    claude = service.sessions.store.messages(report[1]["session"])
    assert [m["content"] for m in claude] == ["fix the flaky login test", "retried the fixture"]
    assert claude[0]["at"].startswith("2026-10-01")
    assert [r["added"] for r in service.import_sessions([plain, project], "a")] == [0, 0]
    # the Claude session went on: only what it gained comes in
    claude_file(
        project / "abc.jsonl",
        "abc-123",
        [("fix the flaky login test", "retried the fixture"), ("and the docs?", "updated")],
    )
    assert [r["added"] for r in service.import_sessions([project], "a")] == [2]
    assert service.db.execute("SELECT count(*) FROM sessions").fetchone()[0] == 2
    assert "deploy ENV=prod" in service.search_episodes("a", "how do we deploy")[0].text


def test_a_bad_transcript_imports_nothing(service: MemoryService, tmp_path: Path) -> None:
    good = jsonl(tmp_path / "good.jsonl", [{"role": "user", "content": "hi"}])
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"role": "user", "content": "ok"}\n{"role": "wizard", "content": "x"}\n')
    with pytest.raises(InvalidFieldError, match=r"bad\.jsonl:2"):
        service.import_sessions([good, bad], "a")
    assert service.db.execute("SELECT count(*) FROM sessions").fetchone()[0] == 0
    service.import_sessions([good], "a")
    jsonl(good, [{"role": "user", "content": "something else"}])
    with pytest.raises(TranscriptChangedError):
        service.import_sessions([good], "a")


def test_a_malformed_last_line_imports_nothing_unless_it_is_still_being_written(
    service: MemoryService, tmp_path: Path
) -> None:
    """One bad line imports nothing, wherever it is; a last line with no newline after it
    yet is a host still writing it, left for the next import."""
    path = tmp_path / "t.jsonl"
    path.write_text('{"role": "user", "content": "ok"}\n{"role": "assistant", "cont\n')
    with pytest.raises(InvalidFieldError, match=r"t\.jsonl:2: not JSON"):
        service.import_sessions([path], "a")
    assert service.db.execute("SELECT count(*) FROM sessions").fetchone()[0] == 0
    path.write_text('{"role": "user", "content": "ok"}\n{"role": "assistant", "cont')
    assert service.import_sessions([path], "a")[0]["added"] == 1
    done = run_cli("sessions", "import", "--agent", "a", str(path))
    assert done.returncode == 0 and "nothing new" in done.stdout, done.stderr
    path.write_text('{"role": "user", "content": "ok"}\n{"role": "assistant", "cont\n')
    done = run_cli("sessions", "import", "--agent", "a", str(path))
    assert done.returncode == 1 and "t.jsonl:2: not JSON" in done.stderr


def test_the_block_for_a_query_holds_rounds_of_other_sessions_within_their_budget(
    workspace: Workspace,
) -> None:
    set_value(workspace.config_path, "episodic.max_chars", "400")
    service = MemoryService(workspace, Config.load(workspace.config_path))
    service.save("a", "an unrelated note")
    old = talk(service, "a", ("the release is blocked on the Windows installer", "I'll sign it"))
    for n in range(10):
        talk(service, "a", (f"noise {n} about the Windows installer", "x" * 300))
    now = talk(service, "a", ("is the Windows installer signed?", "checking"))
    block = service.build_context("a", session=now, query="is the Windows installer signed?")
    episodes = block.split(EPISODES_HEADING + "\n")[1]
    assert now[:12] not in episodes  # the current session is the history, not an episode
    assert sum(len(line) + 1 for line in episodes.splitlines()) <= 400
    assert old[:12] in episodes or "noise" in episodes
    assert "## 归档记忆\n" in block
    assert EPISODES_HEADING not in service.build_context("a")  # no query: today's block
    service.close()


def test_episodes_over_the_socket_and_the_cli(workspace: Workspace, tmp_path: Path) -> None:
    transcript = jsonl(
        tmp_path / "t.jsonl",
        [
            {"role": "user", "content": "which port does the api listen on?"},
            {"role": "assistant", "content": "8443, behind the proxy"},
        ],
    )
    assert run_cli("sessions", "import", "--agent", "a", str(transcript)).returncode == 0
    with daemon(workspace, tmp_path / "daemon.log") as running:
        status, reply = running.curl("-XPOST", "-d", '{"agent": "a"}', "http://x/api/v1/sessions")
        session = reply["data"]["id"]
        for role, content in (("user", "what colour is the logo?"), ("assistant", "teal")):
            running.curl(
                "-d",
                json.dumps({"role": role, "content": content}),
                f"http://x/api/v1/sessions/{session}/messages",
            )
        deadline = time.monotonic() + 20
        while True:  # the indexer takes the new round in
            status, reply = running.curl(
                "--get",
                "--data-urlencode",
                "q=logo colour",
                "http://x/api/v1/agents/a/episodes/search",
            )
            assert status == 200, reply
            hits = reply["data"]["episodes"]
            if hits and hits[0]["session"] == session:
                break
            assert time.monotonic() < deadline, hits
            time.sleep(0.2)
        assert hits[0]["round"] == 0 and "teal" in hits[0]["text"]
        with Client(running.socket) as client:
            # health shows the episodes' backlog (docs/api.md), none left once it is in
            wait_until(lambda: client.health()["indexes"]["episodes"]["pending"] == 0)
            found = client.search_episodes("a", "logo colour", limit=1)["episodes"]
            assert [h["session"] for h in found] == [session]
            assert (
                client.search_episodes("a", "logo colour", exclude=session)["episodes"][0][
                    "session"
                ]
                != session
            )
        out = run_cli("episodes", "search", "--agent", "a", "api port", "--json")
        assert out.returncode == 0, out.stderr
        assert "8443" in json.loads(out.stdout)["episodes"][0]["text"]
    again = run_cli("sessions", "import", "--agent", "a", str(transcript))
    assert again.returncode == 0 and "nothing new" in again.stdout
    alone = run_cli("episodes", "search", "--agent", "a", "logo")
    assert alone.returncode == 0 and "teal" in alone.stdout


def test_a_word_more_rounds_hold_than_common_rounds_is_left_out_while_rarer_remain(
    service: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FTS5 scores every round a query word matches: one held by more than COMMON_ROUNDS
    rounds (next to no weight) is left out while a rarer word remains, and when every
    word is that common the rarest alone is matched."""
    import oryxmem.index.episodes as episodes_module

    talk(
        service,
        "a",
        *[(f"the project note {n}", "ok") for n in range(6)],
        ("the project deploy is on friday", "ok"),
        ("the project budget", "small"),
    )
    while service.episodes_step():
        pass
    words = EpisodeIndex(None, None)

    def by_words(query: str) -> set[int]:
        hits = words.search(service.index_db, "a", query, 20)
        return {hit.round for hit in hits if "keyword" in hit.arms}

    # (a round's context column holds the round before it)
    assert by_words("project deploy") == set(range(8))
    monkeypatch.setattr(episodes_module, "COMMON_ROUNDS", 3)  # "project": in all 8
    assert by_words("project deploy") == {6, 7}
    assert by_words("project budget") == {7}
    # every word common: the rarest ("note": 7 rounds) alone, not "project" (8)
    assert by_words("project note") == set(range(7))
