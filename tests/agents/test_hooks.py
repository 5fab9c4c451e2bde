"""oryxmem hook and the installers, run as the hosts run them: a subprocess with the
host's JSON on stdin (and a transcript file in the host's format), and config files
that already hold other servers, other hooks and comments."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import tomlkit
from support.daemon import daemon
from support.processes import MCP_INITIALIZE, run_cli

from oryxmem.store.format import parse
from oryxmem.workspace import Workspace

CLAUDE_TRANSCRIPT = [
    {
        "type": "user",
        "uuid": "u1",
        "sessionId": "s1",
        "timestamp": "2026-12-01T10:00:00Z",
        "message": {"role": "user", "content": "fix the CI please"},
    },
    {
        "type": "assistant",
        "uuid": "a1",
        "parentUuid": "u1",
        "timestamp": "2026-12-01T10:00:01Z",
        "message": {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Let me look."},
                {"type": "text", "text": "Looking at the failing job."},
                {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "pytest"}},
            ],
        },
    },
    {
        "type": "user",
        "uuid": "u2",
        "parentUuid": "a1",
        "timestamp": "2026-12-01T10:00:02Z",
        "message": {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "1 failed"}],
        },
    },
    {
        "type": "assistant",
        "uuid": "a2",
        "parentUuid": "u2",
        "timestamp": "2026-12-01T10:00:03Z",
        "message": {
            "role": "assistant",
            "content": [{"type": "text", "text": "Pinned pytest to 8.x; CI is green."}],
        },
    },
]


def hook(event: str, payload: Any, *args: str) -> subprocess.CompletedProcess[str]:
    stdin = payload if isinstance(payload, str) else json.dumps(payload)
    return run_cli("hook", event, *args, stdin=stdin)


def context_of(done: subprocess.CompletedProcess[str]) -> tuple[str, str]:
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert done.stdout, done.stderr
    output = json.loads(done.stdout)["hookSpecificOutput"]
    return output["hookEventName"], output["additionalContext"]


def archival(workspace: Workspace, agent: str) -> list[str]:
    document = parse(workspace.memory_path(agent).read_text(encoding="utf-8"))
    return [entry.content for entry in document.archival]


def base(event: str, **more: Any) -> dict[str, Any]:
    return {"session_id": "s1", "cwd": "/src", "hook_event_name": event, **more}


def test_claude_code_session_start_prompt_and_stop_through_the_daemon(
    workspace: Workspace, tmp_path: Path
) -> None:
    transcript = tmp_path / "s1.jsonl"
    transcript.write_text("".join(json.dumps(line) + "\n" for line in CLAUDE_TRANSCRIPT))
    run_cli("save", "--agent", "coder", "--scope", "core", "Project uses Python 3.11.")
    run_cli("save", "--agent", "coder", "User likes tea.")
    run_cli("save", "--agent", "coder", "The staging server is called bluejay.")
    with daemon(workspace, tmp_path / "d.log") as running:
        start = hook(
            "session-start",
            base("SessionStart", source="startup", transcript_path=str(transcript)),
            "--agent",
            "coder",
        )
        name, block = context_of(start)
        assert name == "SessionStart" and "Project uses Python 3.11." in block and "## " in block

        asked = base(
            "UserPromptSubmit", prompt="deploy it to staging", transcript_path=str(transcript)
        )
        name, found = context_of(hook("prompt", asked, "--agent", "coder"))
        assert name == "UserPromptSubmit" and "bluejay" in found and "tea" not in found
        nothing = hook("prompt", base("UserPromptSubmit", prompt="zqxj vvkw"), "--agent", "coder")
        assert nothing.returncode == 0 and nothing.stdout == ""  # nothing relevant: nothing said

        stop = hook(
            "stop",
            base("Stop", stop_hook_active=False, transcript_path=str(transcript)),
            "--agent",
            "coder",
        )
        assert stop.returncode == 0 and stop.stdout == "", stop.stderr
        assert running.curl("http://x/api/v1/health")[0] == 200
    assert archival(workspace, "coder")[-1] == (
        'trigger: user="fix the CI please" reply="Pinned pytest to 8.x; CI is green."'
    )


def test_session_start_on_an_empty_memory_says_nothing(
    workspace: Workspace, tmp_path: Path
) -> None:
    with daemon(workspace, tmp_path / "d.log"):
        start = hook("session-start", base("SessionStart", source="startup"), "--agent", "coder")
        assert start.returncode == 0 and start.stdout == "", start.stdout
        run_cli("save", "--agent", "coder", "User likes tea.")
        _, block = context_of(
            hook("session-start", base("SessionStart", source="startup"), "--agent", "coder")
        )
        assert "User likes tea." in block


def test_the_agent_comes_from_oryxmem_agent_and_an_unsafe_name_falls_back(
    workspace: Workspace, tmp_path: Path
) -> None:
    stop = base("AfterAgent", prompt="hi", prompt_response="hello")
    done = run_cli(
        "hook", "stop", "--client", "gemini", stdin=json.dumps(stop), env={"ORYXMEM_AGENT": "gem"}
    )
    assert done.returncode == 0 and archival(workspace, "gem") == [
        'trigger: user="hi" reply="hello"'
    ]
    bad = run_cli(
        "hook", "stop", "--client", "gemini", stdin=json.dumps(stop), env={"ORYXMEM_AGENT": "../x"}
    )
    assert bad.returncode == 0 and "using the global" in bad.stderr
    assert "hello" in workspace.global_memory_dir.joinpath("MEMORY.md").read_text()


def test_gemini_hooks_answer_in_gemini_json_and_its_after_agent_leaves_the_footprint(
    workspace: Workspace, tmp_path: Path
) -> None:
    run_cli("save", "--agent", "gem", "The user prefers short answers.")
    with daemon(workspace, tmp_path / "d.log"):
        name, block = context_of(
            hook(
                "session-start",
                base("SessionStart", source="startup", timestamp="x"),
                "--client",
                "gemini",
                "--agent",
                "gem",
            )
        )
        assert name == "SessionStart" and "short answers" in block
        asked = base("BeforeAgent", prompt="how long should answers be?")
        name, found = context_of(hook("prompt", asked, "--client", "gemini", "--agent", "gem"))
        assert name == "BeforeAgent" and "short answers" in found
        after = base(
            "AfterAgent",
            prompt="summarise the diff",
            prompt_response="Two files changed.",
            stop_hook_active=False,
        )
        done = hook("stop", after, "--client", "gemini", "--agent", "gem")
        assert done.returncode == 0 and done.stdout == ""
    assert (
        archival(workspace, "gem")[-1]
        == 'trigger: user="summarise the diff" reply="Two files changed."'
    )


def test_codex_stop_pairs_last_assistant_message_with_the_prompt_its_prompt_hook_kept(
    workspace: Workspace,
) -> None:
    """Codex's Stop carries the reply but not the prompt; with no daemon the prompt hook
    says nothing but keeps the prompt, and the stop saves through the stores."""
    asked = base("UserPromptSubmit", prompt="rename the module", turn_id="t1", model="gpt")
    quiet = hook("prompt", asked, "--client", "codex", "--agent", "cx")
    assert quiet.returncode == 0 and quiet.stdout == ""
    stop = base(
        "Stop",
        turn_id="t1",
        model="gpt",
        stop_hook_active=False,
        transcript_path=None,
        last_assistant_message="Renamed oryx.py to core.py.",
        permission_mode="default",
    )
    done = hook("stop", stop, "--client", "codex", "--agent", "cx")
    assert done.returncode == 0 and done.stdout == ""
    assert archival(workspace, "cx") == [
        'trigger: user="rename the module" reply="Renamed oryx.py to core.py."'
    ]
    assert run_cli("sync", "--check").returncode == 0


def test_a_prompt_hook_forgets_prompts_of_sessions_long_over_and_killed_hooks_temp_files(
    workspace: Workspace,
) -> None:
    """Each Codex session leaves its last prompt in .oryxos/run/hooks/; a hook killed
    mid-write leaves a temp file. The prompt hook removes a week-old prompt and a
    minute-old temp file, and leaves recent ones (another session's stop still reads
    its prompt) and files that are not its own."""
    folder = workspace.run_dir / "hooks"
    folder.mkdir(parents=True)
    now = time.time()
    ages = {
        "a" * 32 + ".prompt": 8 * 86400,  # a session long over
        "b" * 32 + ".prompt": 86400,  # yesterday's: its stop may still come
        "." + "c" * 32 + ".prompt.0badc0de.tmp": 120,  # a killed hook's
        "." + "d" * 32 + ".prompt.12345678.tmp": 1,  # a hook writing it now
        "notes.txt": 30 * 86400,  # not a hook's
    }
    for name, age in ages.items():
        (folder / name).write_text("kept prompt")
        os.utime(folder / name, (now - age, now - age))
    asked = base("UserPromptSubmit", prompt="rename the module", turn_id="t1", model="gpt")
    assert hook("prompt", asked, "--client", "codex", "--agent", "cx").returncode == 0
    left = {path.name for path in folder.iterdir()}
    this_session = {name for name in left if name not in ages}
    assert len(this_session) == 1 and this_session.pop().endswith(".prompt")
    assert left - {name for name in left if name not in ages} == {
        "b" * 32 + ".prompt",
        "." + "d" * 32 + ".prompt.12345678.tmp",
        "notes.txt",
    }


@pytest.mark.parametrize(
    "stdin",
    [
        "",
        "not json",
        "[1, 2]",
        '{"prompt": 5}',
        '{"transcript_path": "/nonexistent"}',
        '{"prompt": "\\ud800"}',
    ],
)
def test_odd_input_exits_0_prints_nothing_and_never_a_traceback(
    workspace: Workspace, stdin: str
) -> None:
    for event in ("session-start", "prompt", "stop"):
        done = hook(event, stdin, "--agent", "coder")
        assert done.returncode == 0 and "Traceback" not in done.stderr
        assert done.stdout == ""
    assert not workspace.memory_path("coder").exists() or archival(workspace, "coder") == []


def test_a_hook_outside_any_workspace_or_with_a_dead_daemon_exits_0_quickly(
    workspace: Workspace, tmp_path: Path
) -> None:
    outside = subprocess.run(
        [sys.executable, "-m", "oryxmem", "hook", "prompt"],
        input=json.dumps(base("UserPromptSubmit", prompt="x")),
        capture_output=True,
        text=True,
        env={**os.environ, "ORYXMEM_ROOT": str(tmp_path / "none")},
        timeout=30,
    )
    assert outside.returncode == 0 and outside.stdout == "" and "Traceback" not in outside.stderr
    run_cli("save", "--agent", "coder", "Deploys go through staging.")
    alone = hook("session-start", base("SessionStart", source="startup"), "--agent", "coder")
    assert alone.returncode == 0 and "Deploys go through staging." in context_of(alone)[1]
    with daemon(workspace, tmp_path / "d.log") as running:
        running.proc.send_signal(19)  # SIGSTOP: the socket is there, nobody answers
        try:
            done = hook("prompt", base("UserPromptSubmit", prompt="deploy"), "--agent", "coder")
        finally:
            running.proc.send_signal(18)  # SIGCONT
    # It gives up on the daemon and answers from the files, or says nothing when its
    # deadline comes first; either way exit 0 and never a traceback (the hook's own
    # deadline bounds it; its time is measured in bench/agents_bench.py).
    assert done.returncode == 0 and "Traceback" not in done.stderr
    assert done.stdout == "" or "staging" in context_of(done)[1]


# --- install ------------------------------------------------------------------------


def install(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, env={"HOME": str(home)})


def test_mcp_install_for_every_host_keeps_other_servers_and_is_idempotent(
    workspace: Workspace, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    root = workspace.root
    (root / ".vscode").mkdir()
    (root / ".vscode" / "mcp.json").write_text(
        json.dumps(
            {"servers": {"git": {"type": "stdio", "command": "git-mcp"}}, "inputs": []}, indent=4
        )
    )
    (root / ".mcp.json").write_text(
        json.dumps({"mcpServers": {"fs": {"command": "npx", "args": ["fs"]}}})
    )
    codex = home / ".codex" / "config.toml"
    codex.parent.mkdir(parents=True)
    codex.write_text(
        '# my settings\nmodel = "o4"  # the model\n\n[mcp_servers.docs]\ncommand = "docs-mcp"\n'
    )
    cases = [
        ("claude-code", "project", root / ".mcp.json", "mcpServers"),
        ("claude-code", "user", home / ".claude.json", "mcpServers"),
        ("gemini", "project", root / ".gemini" / "settings.json", "mcpServers"),
        ("cursor", "project", root / ".cursor" / "mcp.json", "mcpServers"),
        ("cursor", "user", home / ".cursor" / "mcp.json", "mcpServers"),
        ("vscode", "project", root / ".vscode" / "mcp.json", "servers"),
    ]
    for client, scope, path, key in cases:
        before = path.read_text() if path.exists() else None
        dry = install(
            "mcp",
            "install",
            "--client",
            client,
            "--scope",
            scope,
            "--agent",
            "coder",
            "--dry-run",
            home=home,
        )
        assert dry.returncode == 0 and '"oryxmem"' in dry.stdout, dry.stderr
        assert (path.read_text() if path.exists() else None) == before  # a dry run writes nothing
        done = install(
            "mcp", "install", "--client", client, "--scope", scope, "--agent", "coder", home=home
        )
        assert done.returncode == 0 and f"wrote {path}" in done.stdout, done.stderr
        entry = json.loads(path.read_text())[key]["oryxmem"]
        assert entry["command"] == sys.executable
        assert entry["args"] == [
            "-P",
            "-m",
            "oryxmem",
            "--root",
            str(root),
            "mcp",
            "--agent",
            "coder",
        ]
        again = install(
            "mcp", "install", "--client", client, "--scope", scope, "--agent", "coder", home=home
        )
        assert "nothing changed" in again.stdout
    assert json.loads((root / ".mcp.json").read_text())["mcpServers"]["fs"] == {
        "command": "npx",
        "args": ["fs"],
    }
    vscode = json.loads((root / ".vscode" / "mcp.json").read_text())
    assert vscode["servers"]["git"]["command"] == "git-mcp" and vscode["inputs"] == []
    assert vscode["servers"]["oryxmem"]["type"] == "stdio"

    done = install("mcp", "install", "--client", "codex", "--scope", "user", home=home)
    assert done.returncode == 0, done.stderr
    text = codex.read_text()
    assert (
        text.startswith('# my settings\nmodel = "o4"  # the model\n')
        and "[mcp_servers.docs]" in text
    )
    table = tomlkit.parse(text)["mcp_servers"]["oryxmem"]
    assert table["command"] == sys.executable and table["args"][-1] == "mcp"
    assert (
        "nothing changed"
        in install("mcp", "install", "--client", "codex", "--scope", "user", home=home).stdout
    )

    # The registered command really serves: it answers an MCP initialize on stdio.
    entry = json.loads((root / ".mcp.json").read_text())["mcpServers"]["oryxmem"]
    proc = subprocess.Popen(
        [entry["command"], *entry["args"]],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps(MCP_INITIALIZE) + "\n")
    proc.stdin.flush()
    assert json.loads(proc.stdout.readline())["result"]["serverInfo"]["name"] == "oryxmem"
    proc.communicate(timeout=30)


def test_install_refuses_a_config_it_cannot_read_and_changes_nothing(
    workspace: Workspace, tmp_path: Path
) -> None:
    broken = workspace.root / ".cursor" / "mcp.json"
    broken.parent.mkdir()
    broken.write_text('{"mcpServers": {,}')
    done = install("mcp", "install", "--client", "cursor", home=tmp_path)
    assert done.returncode == 1 and "not plain JSON" in done.stderr
    assert broken.read_text() == '{"mcpServers": {,}'
    listed = workspace.root / ".claude" / "settings.json"
    listed.parent.mkdir()
    listed.write_text("[]")
    assert install("hook", "install", "claude-code", home=tmp_path).returncode == 1
    assert listed.read_text() == "[]"


def test_hook_install_keeps_other_hooks_and_the_installed_commands_run(
    workspace: Workspace, tmp_path: Path
) -> None:
    settings = workspace.root / ".claude" / "settings.json"
    settings.parent.mkdir()
    theirs = {"matcher": "Bash", "hooks": [{"type": "command", "command": "lint.sh"}]}
    settings.write_text(
        json.dumps({"permissions": {"allow": ["Bash"]}, "hooks": {"Stop": [theirs]}})
    )
    assert (
        install("hook", "install", "claude-code", "--agent", "coder", home=tmp_path).returncode == 0
    )
    assert (
        "nothing changed"
        in install("hook", "install", "claude-code", "--agent", "coder", home=tmp_path).stdout
    )
    data = json.loads(settings.read_text())
    assert data["permissions"] == {"allow": ["Bash"]} and data["hooks"]["Stop"][0] == theirs
    assert sorted(data["hooks"]) == ["SessionStart", "Stop", "UserPromptSubmit"]
    ours = data["hooks"]["Stop"][1]["hooks"][0]
    assert ours["type"] == "command" and ours["timeout"] == 10
    stop = base("AfterAgent", prompt="ping", prompt_response="pong")
    ran = subprocess.run(
        shlex.split(ours["command"].replace("--client claude-code", "--client gemini")),
        input=json.dumps(stop),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=30,
    )
    assert ran.returncode == 0 and archival(workspace, "coder") == [
        'trigger: user="ping" reply="pong"'
    ]

    assert install("hook", "install", "gemini", "--scope", "user", home=tmp_path).returncode == 0
    gemini = json.loads((tmp_path / ".gemini" / "settings.json").read_text())["hooks"]
    assert sorted(gemini) == ["AfterAgent", "BeforeAgent", "SessionStart"]
    assert gemini["AfterAgent"][0]["hooks"][0]["timeout"] == 10000  # Gemini counts milliseconds
    assert install("hook", "install", "codex", home=tmp_path).returncode == 0
    codex = json.loads((workspace.root / ".codex" / "hooks.json").read_text())["hooks"]
    assert sorted(codex) == ["SessionStart", "Stop", "UserPromptSubmit"]


def hostile_folder(folder: Path, marker: Path, *, package: bool) -> Path:
    """A project that plants its own ``oryxmem`` (a module, or a package folder) which,
    if ever imported, leaves ``marker`` behind and fails."""
    folder.mkdir(parents=True)
    code = f"open({str(marker)!r}, 'w').write('ran')\nraise SystemExit('planted code ran')\n"
    if package:
        (folder / "oryxmem").mkdir()
        (folder / "oryxmem" / "__init__.py").write_text(code)
        (folder / "oryxmem" / "__main__.py").write_text(code)
    else:
        (folder / "oryxmem.py").write_text(code)
    return folder


@pytest.mark.parametrize("package", [False, True], ids=["oryxmem.py", "oryxmem/"])
def test_registered_commands_started_in_a_hostile_folder_run_oryxmem_not_the_folder(
    workspace: Workspace, tmp_path: Path, package: bool
) -> None:
    """A host starts the MCP server and the hooks in the project it opened; a project
    holding its own oryxmem.py (or oryxmem/) must not run through our registration."""
    import anyio
    from mcp import Client, StdioServerParameters

    marker = tmp_path / "planted-code-ran"
    project = hostile_folder(tmp_path / "project", marker, package=package)
    home = tmp_path / "home"
    assert (
        install(
            "mcp", "install", "--client", "claude-code", "--scope", "user", home=home
        ).returncode
        == 0
    )
    assert install("hook", "install", "claude-code", "--scope", "user", home=home).returncode == 0
    server = json.loads((home / ".claude.json").read_text())["mcpServers"]["oryxmem"]

    async def save_and_recall() -> str:
        params = StdioServerParameters(
            command=server["command"], args=server["args"], env=dict(os.environ), cwd=project
        )
        async with Client(params) as client:
            await client.call_tool("save_memory", {"content": "likes green tea"})
            result = await client.call_tool("recall_memory", {"keyword": "tea"})
            return "".join(block.text for block in result.content)

    assert "likes green tea" in anyio.run(save_and_recall)  # no daemon: the files directly
    hooks = json.loads((home / ".claude" / "settings.json").read_text())["hooks"]

    def run_hook(event: str, payload: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            hooks[event][0]["hooks"][0]["command"],
            shell=True,  # as the hosts run a hook's command line
            input=json.dumps(payload),
            capture_output=True,
            text=True,
            cwd=project,
            timeout=60,
        )

    with daemon(workspace, tmp_path / "daemon.log"):
        assert "likes green tea" in anyio.run(save_and_recall)  # through the daemon
        ran = run_hook("SessionStart", base("SessionStart", source="startup", cwd=str(project)))
        assert ran.returncode == 0 and "likes green tea" in ran.stdout, ran.stderr
    assert not marker.exists(), "the project's own oryxmem ran"


def test_installing_again_replaces_an_older_shadowable_registration(
    workspace: Workspace, tmp_path: Path
) -> None:
    settings = workspace.root / ".claude" / "settings.json"
    settings.parent.mkdir()
    old = f"{sys.executable} -m oryxmem --root {workspace.root} hook stop --client claude-code"
    settings.write_text(
        json.dumps({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": old}]}]}})
    )
    (workspace.root / ".mcp.json").write_text(
        json.dumps(
            {
                "mcpServers": {
                    "oryxmem": {"command": sys.executable, "args": ["-m", "oryxmem", "mcp"]}
                }
            }
        )
    )
    assert install("hook", "install", "claude-code", home=tmp_path).returncode == 0
    assert install("mcp", "install", "--client", "claude-code", home=tmp_path).returncode == 0
    stop = json.loads(settings.read_text())["hooks"]["Stop"]
    assert len(stop) == 1 and " -P -m oryxmem " in stop[0]["hooks"][0]["command"]
    server = json.loads((workspace.root / ".mcp.json").read_text())["mcpServers"]["oryxmem"]
    assert server["args"][:3] == ["-P", "-m", "oryxmem"]


@pytest.mark.parametrize("host", ["claude-code", "gemini", "codex"])
def test_installing_into_a_project_says_the_hosts_one_time_trust_step(
    workspace: Workspace, tmp_path: Path, host: str
) -> None:
    project = install("mcp", "install", "--client", host, home=tmp_path)
    assert project.returncode == 0 and project.stderr.startswith("note: ")
    assert "trust" in project.stderr or "approve" in project.stderr
    user = install("mcp", "install", "--client", host, "--scope", "user", home=tmp_path)
    assert user.returncode == 0 and user.stderr == ""
