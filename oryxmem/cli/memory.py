"""The commands that read and write memory: save, recall, search, show, context, prompt,
episodes, sessions, agents, history, reindex."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from oryxmem.errors import DaemonUnavailableError
from oryxmem.payloads import (
    agents_data,
    context_data,
    episodes_data,
    forgotten_data,
    memory_data,
    prompt_data,
    recall_data,
    save_data,
    search_data,
)
from oryxmem.store.format import ARCHIVAL, SCOPES

if TYPE_CHECKING:
    from oryxmem.service import MemoryService


from oryxmem.cli.base import (
    Context,
    F,
    Progress,
    agent_option,
    cli,
    describe,
    emit_json,
    json_option,
    pad,
    pass_context,
)
from oryxmem.visible import revealed as terminal_line
from oryxmem.visible import revealed_text as terminal_safe


@cli.command()
@agent_option
@click.option(
    "--scope", type=click.Choice(SCOPES), default=ARCHIVAL, show_default=True, help="Section."
)
@click.argument("content")
@json_option
@pass_context
def save(ctx: Context, agent: str | None, scope: str, content: str, as_json: bool) -> None:
    """Save CONTENT as a new entry ('-' reads it from stdin)."""
    agent = ctx.agent(agent)
    if content == "-":
        content = sys.stdin.read()
    ctx.check_content(content)
    data = ctx.call(
        lambda client: client.save(agent, content, scope),
        lambda service: save_data(service.save(agent, content, scope, source="cli")),
    )
    if as_json:
        emit_json(data)
        return
    where = describe(data["agent"])
    verb = "kept for" if data.get("deferred") else "saved to"
    click.echo(f"{verb} {where} ({scope}): {data['entry']['line']}")


@cli.command()
@agent_option
@click.argument("keyword")
@json_option
@pass_context
def recall(ctx: Context, agent: str | None, keyword: str, as_json: bool) -> None:
    """Print what recall_memory answers for KEYWORD: by memory.recall, the archival entries
    that best match it by meaning and words (hybrid, the default; best first), or every
    one that holds it, in any case (keyword; oldest first)."""
    agent = ctx.agent(agent)
    data = ctx.call(
        lambda client: client.recall(agent, keyword),
        lambda service: recall_data(service.recall(agent, keyword)),
        needs_model=True,
    )
    if as_json:
        emit_json(data)
        return
    for line in data["lines"]:
        click.echo(terminal_line(line))


# The modes of oryxmem.search.MODES (not imported here: it loads numpy; a test checks).
SEARCH_MODES = ("hybrid", "semantic", "keyword")


@cli.command()
@agent_option
@click.option(
    "-k", "--limit", type=click.IntRange(1, 100), default=None, help="How many (recall.limit)."
)
@click.option(
    "--mode",
    type=click.Choice(SEARCH_MODES),
    default="hybrid",
    show_default=True,
    help="By meaning and words, by meaning only, or by words only.",
)
@click.option(
    "--relevant",
    is_flag=True,
    help="Only the hits the words found, or close enough in meaning (as recall's).",
)
@click.argument("query")
@json_option
@pass_context
def search(
    ctx: Context,
    agent: str | None,
    limit: int | None,
    mode: str,
    relevant: bool,
    query: str,
    as_json: bool,
) -> None:
    """Print the entries (core and archival) that best answer QUERY, best first, with
    their score and the arms that found them."""
    agent = ctx.agent(agent)

    def local(service: MemoryService) -> dict[str, Any]:
        from oryxmem.service.finding import RECALL_MIN_SIMILARITY

        least = RECALL_MIN_SIMILARITY if relevant else None
        found = service.search(agent, query, limit=limit, mode=mode, min_similarity=least)
        return search_data(found)

    data = ctx.call(
        lambda client: client.search(agent, query, limit, mode, relevant),
        local,
        needs_model=mode != "keyword",
    )
    if as_json:
        emit_json(data)
        return
    if data["note"]:
        click.echo(f"oryxmem: note: {data['note']}", err=True)
    for hit in data["hits"]:
        arms = "+".join(hit["arms"])
        click.echo(f"{hit['score']:.3f}  {arms:<16} {terminal_line(hit['line'])}")
    if data["pending"]["words"]:
        click.echo(
            f"oryxmem: {data['pending']['words']} entries are not in the words index yet"
            " (the daemon is taking a backlog in): this search did not see them",
            err=True,
        )
    if data["unembedded"]:
        click.echo(
            f"oryxmem: {data['unembedded']} entries are not embedded yet (searched by words"
            " only); the daemon embeds them, or run 'oryxmem reindex'",
            err=True,
        )


@cli.command()
@click.option("--agent", "-a", default=None, metavar="NAME", help="Only this agent (omit for all).")
@json_option
@pass_context
def reindex(ctx: Context, agent: str | None, as_json: bool) -> None:
    """Build the search indexes again from the rows (one agent's, or all): the keyword
    indexes at once, the vectors with a progress bar (by the daemon when it runs)."""
    name = ctx.agent(agent) if agent is not None else None
    show_bar = not as_json and sys.stderr.isatty()
    client = ctx.client()
    if client is not None:
        try:
            started = client.reindex(name)
        except DaemonUnavailableError:
            client = None
    if client is None:
        with Progress(show_bar) as bar:
            done = ctx.service.reindex(name, progress=lambda d, t: bar.set(d, t))
        data = {"agent": name, "embedded": done, "indexes": ctx.service.index_summary()}
    else:
        with Progress(show_bar) as bar:
            total = int(started["indexes"].get("vectors", {}).get("pending") or 0)
            while True:
                left = int(client.health()["indexes"].get("vectors", {}).get("pending") or 0)
                bar.set(total - left, total)
                if not left:
                    break
                time.sleep(0.2)
        data = {"agent": name, "embedded": total, "indexes": client.health()["indexes"]}
    if as_json:
        emit_json(data)
    else:
        click.echo(
            f"reindexed {describe(name or '') if name else 'every agent'}:"
            f" {data['embedded']} entries embedded"
        )


def _table(title: str, entries: list[dict[str, Any]], ids: bool = False) -> list[str]:
    lines = [f"{title} ({len(entries)})"]
    if not entries:
        return [*lines, "  (none)"]
    width = len(str(len(entries)))
    id_width = max(len(entry["id"]) for entry in entries) if ids else 0
    id_head = f"{'ID':<{id_width}}  " if ids else ""
    lines.append(f"  {'#':>{width}}  {id_head}{'TIME':<19}  CONTENT")
    for number, entry in enumerate(entries, 1):
        line = entry["line"]
        content = line.split("] ", 1)[1] if entry["ts"] else line[2:]
        shown_id = f"{entry['id']:<{id_width}}  " if ids else ""
        lines.append(
            f"  {number:>{width}}  {shown_id}{entry['ts'] or '-':<19}  {terminal_line(content)}"
        )
    return lines


@cli.command()
@agent_option
@click.option("--ids", is_flag=True, help="Show each entry's id too (what forget takes).")
@json_option
@pass_context
def show(ctx: Context, agent: str | None, ids: bool, as_json: bool) -> None:
    """Show every entry, as two tables: 核心记忆 (core) and 归档记忆 (archival)."""
    agent = ctx.agent(agent)
    data = ctx.call(
        lambda client: client.memory(agent), lambda service: memory_data(service.get(agent))
    )
    if as_json:
        emit_json(data)
        return
    click.echo(f"memory of {describe(data['agent'])}")
    click.echo("\n".join(_table("核心记忆 core", data["core"], ids)))
    click.echo("\n".join(_table("归档记忆 archival", data["archival"], ids)))


@cli.command()
@agent_option
@click.option("--match", metavar="TEXT", help="Every entry that holds TEXT (any case); asks first.")
@click.option("--yes", is_flag=True, help="Do not ask (for scripts).")
@click.option("--purge", is_flag=True, help="Also take their text out of history.")
@click.argument("ids", nargs=-1)
@json_option
@pass_context
def forget(
    ctx: Context,
    agent: str | None,
    match: str | None,
    yes: bool,
    purge: bool,
    ids: tuple[str, ...],
    as_json: bool,
) -> None:
    """Take entries out of memory by ID (as 'show --ids' gives them) or --match: out of
    MEMORY.md, the rows and every index, with a tombstone so no git merge brings them
    back. History keeps that they went (with --purge, not what they said)."""
    agent = ctx.agent(agent)
    if bool(ids) == bool(match):
        raise click.UsageError("name the entries: IDs, or --match TEXT (not both)")
    chosen = list(ids)
    if match:
        data = ctx.call(
            lambda client: client.memory(agent), lambda service: memory_data(service.get(agent))
        )
        folded = match.casefold()
        found = [e for e in data["core"] + data["archival"] if folded in e["content"].casefold()]
        if not found:
            raise click.ClickException(f"no entry holds {match!r}; nothing was forgotten")
        for entry in found:
            click.echo(f"  {entry['scope']:<8}  {terminal_line(entry['line'])}", err=True)
        if not yes and not click.confirm(f"forget these {len(found)} entries?", err=True):
            raise click.ClickException("nothing was forgotten")
        chosen = [entry["id"] for entry in found]
    result = ctx.call(
        lambda client: client.forget(agent, chosen, purge=purge),
        lambda service: forgotten_data(
            service.forget(agent, chosen, purge=purge, source="cli"), service.resolve(agent)
        ),
    )
    if as_json:
        emit_json(result)
        return
    for entry in result["forgotten"]:
        click.echo(f"forgot from {describe(result['agent'])}: {terminal_line(entry['line'])}")


def block_options(func: F) -> F:
    """--session, --turns and --query: what the memory block and the prompt are made for."""
    for option in reversed(
        [
            click.option("--session", default=None, help="Also this session's last turns."),
            click.option(
                "--turns",
                type=click.IntRange(1),
                default=None,
                help="How many turns (memory.max_history_turns).",
            ),
            click.option(
                "--query",
                "-q",
                default=None,
                help="The user's message: the memories most relevant to it too.",
            ),
        ]
    ):
        func = option(func)
    return func


@cli.command()
@agent_option
@block_options
@json_option
@pass_context
def context(
    ctx: Context,
    agent: str | None,
    session: str | None,
    turns: int | None,
    query: str | None,
    as_json: bool,
) -> None:
    """Print the memory block injected into the agent's prompt (with --session, that
    session's last turns after it)."""
    agent = ctx.agent(agent)

    def local(service: MemoryService) -> dict[str, Any]:
        data = context_data(service, agent, session, query)
        if session:
            data["history"] = service.history(session, turns)
        return data

    data = ctx.call(
        lambda client: client.context(agent, session, turns, query),
        local,
        needs_model=bool(query and query.strip()),
    )
    if as_json:
        emit_json(data)
        return
    click.echo("\n".join(map(terminal_line, data["context"].splitlines())))
    for message in data.get("history", []):
        click.echo(terminal_safe(f"{message['role']}: {message['content']}"))


@cli.command()
@agent_option
@block_options
@click.option(
    "--part",
    type=click.Choice(["text", "system", "memory", "tools"]),
    default="text",
    show_default=True,
    help="Print all four blocks, or only the system text, the memory block or the tools.",
)
@json_option
@pass_context
def prompt(
    ctx: Context,
    agent: str | None,
    session: str | None,
    turns: int | None,
    query: str | None,
    part: str,
    as_json: bool,
) -> None:
    """Print the whole prompt: AGENT.md and USER.md, the memory block, the session's last
    turns, the tools as JSON Schema."""
    agent = ctx.agent(agent)

    data = ctx.call(
        lambda client: client.prompt(agent, session, turns, query),
        lambda service: prompt_data(service, agent, session, turns, query),
        needs_model=bool(query and query.strip()),
    )
    if as_json:
        emit_json(data)
        return
    for note in data["notes"]:
        click.echo(f"note: {terminal_safe(note)}", err=True)
    value = data[part]
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, indent=2)
    click.echo("\n".join(map(terminal_line, text.splitlines())))


@cli.group()
def episodes() -> None:
    """Rounds of past sessions (a user message and its replies), found by a question."""


@episodes.command("search")
@agent_option
@click.option("-k", "--limit", type=click.IntRange(1, 100), default=5, show_default=True)
@click.option("--exclude", default=None, metavar="SESSION", help="Leave this session out.")
@click.argument("query")
@json_option
@pass_context
def episodes_search(
    ctx: Context, agent: str | None, limit: int, exclude: str | None, query: str, as_json: bool
) -> None:
    """Print the rounds of the agent's sessions that best answer QUERY, best first, with
    their session, round and time."""
    agent = ctx.agent(agent)
    data = ctx.call(
        lambda client: client.search_episodes(agent, query, limit, exclude),
        lambda service: episodes_data(
            service.resolve(agent), service.search_episodes(agent, query, limit, exclude)
        ),
        needs_model=True,
    )
    if as_json:
        emit_json(data)
        return
    for hit in data["episodes"]:
        where = f"session {hit['session'][:12]} round {hit['round']}"
        click.echo(f"{hit['score']:.3f}  {hit['at'] or ''}  {where}")
        for line in hit["text"].splitlines():
            click.echo(f"    {terminal_safe(line)}")


@cli.group()
def sessions() -> None:
    """Sessions: bring in past ones from elsewhere."""


@sessions.command("import")
@agent_option
@click.option(
    "--claude-code",
    "claude_code",
    is_flag=True,
    help="Also this workspace's Claude Code sessions (~/.claude/projects/<this folder>/).",
)
@click.argument("paths", nargs=-1, type=click.Path(exists=True, path_type=Path))
@json_option
@pass_context
def sessions_import(
    ctx: Context, agent: str | None, claude_code: bool, paths: tuple[Path, ...], as_json: bool
) -> None:
    """Import transcripts as sessions of the agent: JSONL files (one {role, content[, ts]}
    per line), Claude Code session files, or folders of them. Importing one again adds
    only the messages it gained since."""
    from oryxmem.store.transcripts import claude_project_dir

    chosen = list(paths)
    if claude_code:
        folder = claude_project_dir(ctx.service.workspace.root)
        if not folder.is_dir():
            raise click.ClickException(f"no Claude Code sessions for this folder at {folder}")
        chosen.append(folder)
    if not chosen:
        raise click.UsageError("give transcript files or folders, or --claude-code")
    report = ctx.service.import_sessions(chosen, ctx.agent(agent))
    if as_json:
        emit_json(report)
        return
    for item in report:
        what = f"{item['added']} messages" if item["added"] else "nothing new"
        click.echo(f"{terminal_safe(item['file'])}: {what} ({item['kind']})")


@cli.command()
@json_option
@pass_context
def agents(ctx: Context, as_json: bool) -> None:
    """List the agents (and the global file) with their entry counts."""
    data = ctx.call(lambda client: client.agents(), lambda service: agents_data(service.agents()))
    if as_json:
        emit_json(data)
        return
    click.echo(f"{'AGENT':<24} {'CORE':>6} {'ARCHIVAL':>9}")
    for row in data:
        name = pad(row["agent"] or "(global)", 24)
        if row["problem"]:
            click.echo(f"{name} {'?':>6} {'?':>9}  {row['problem']}")
        else:
            click.echo(f"{name} {row['core']:>6} {row['archival']:>9}")


@cli.command()
@agent_option
@click.option(
    "--limit",
    type=click.IntRange(1, 100_000),
    default=50,
    show_default=True,
    help="The newest this many events.",
)
@json_option
@pass_context
def history(ctx: Context, agent: str | None, limit: int, as_json: bool) -> None:
    """What was added and removed, when, and by which source (file, db, socket), newest
    first."""
    events = ctx.call(
        lambda client: client.history(agent, limit),
        lambda service: service.audit_log(agent, limit),
    )
    if as_json:
        emit_json(events)
        return
    for event in events:
        who = terminal_safe(event["agent"] or "(global)")
        content = terminal_safe(str(event["content"] or ""))
        what = f"- [{event['ts']}] {content}" if event["ts"] else content
        detail = f"  ({terminal_safe(event['detail'])})" if event["detail"] else ""
        click.echo(f"{event['at']}  {who}  {event['op']:<10} {event['source']:<6} {what}{detail}")
