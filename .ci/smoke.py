"""The install people get, used as a person would: run by .ci/run with the Python of a
fresh venv into which the built wheel was installed with no extras.

From a folder unrelated to the workspace: init, the daemon, save / recall / search /
context / prompt over its socket with curl, a tool call through `oryxmem mcp` as a host
registers and starts it (a real MCP client over stdio), a hook, and the one clear line
a configured backend whose extra is not installed gives. Fails loudly on any surprise.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

BIN = Path(sys.executable).parent
ORYXMEM = str(BIN / "oryxmem")


def say(message: str) -> None:
    print(f"smoke: {message}", flush=True)


def run(*args: str, env: dict[str, str], stdin: str | None = None, code: int = 0) -> str:
    done = subprocess.run(
        [ORYXMEM, *args], env=env, input=stdin, capture_output=True, text=True, timeout=300
    )
    if done.returncode != code:
        raise SystemExit(
            f"oryxmem {' '.join(args)} exited {done.returncode} (wanted {code}):\n"
            f"{done.stdout}{done.stderr}"
        )
    return done.stdout + done.stderr


def curl(sock: Path, *args: str) -> dict[str, object]:
    done = subprocess.run(
        ["curl", "-sS", "--unix-socket", str(sock), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    reply = json.loads(done.stdout)
    if reply.get("code") != 0:
        raise SystemExit(f"curl {' '.join(args)}: {reply}")
    data = reply["data"]
    assert isinstance(data, dict), reply
    return data


def check_wheel(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for data in (
        "oryxmem/embed/minilm-qint8.onnx",
        "oryxmem/embed/minilm-tokenizer.json",
        "oryxmem/daemon/units/oryxmem.service",
        "oryxmem/daemon/units/oryxmem.socket",
        "oryxmem/console/templates/agent.html",
        "oryxmem/console/static/console.js",
    ):
        assert data in names, f"{data} is not in {wheel.name}"
    assert importlib.util.find_spec("mem0") is None, "mem0 is installed: not a plain install"
    say(f"{wheel.name} holds its package data; mem0 is not installed")


def mcp_round_trip(command: str, args: list[str], env: dict[str, str], cwd: Path) -> str:
    async def main() -> str:
        params = StdioServerParameters(command=command, args=args, env=env, cwd=cwd)
        async with Client(params) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert {"save_memory", "recall_memory"} <= names, names
            await client.call_tool("save_memory", {"content": "The user drinks oolong."})
            found = await client.call_tool("recall_memory", {"keyword": "oolong"})
            return "".join(getattr(block, "text", "") for block in found.content)

    return anyio.run(main)


def console_round_trip(env: dict[str, str]) -> None:
    """`oryxmem console` as a person starts it: the link it prints signs a client in (a
    cookie), an agent's page shows the memory, and its form saves through the daemon."""
    console = subprocess.Popen(
        [ORYXMEM, "console", "--no-browser"], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert console.stdout is not None
        link = console.stdout.readline().strip()
        base = link.split("/?")[0]
        jar = Path(tempfile.mkdtemp(prefix="oxsmoke-")) / "cookies"

        def fetch(*args: str) -> str:
            done = subprocess.run(
                ["curl", "-sS", "-b", str(jar), "-c", str(jar), *args],
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            )
            return done.stdout

        assert "401" in fetch("-o", "/dev/null", "-w", "%{http_code}", base + "/"), "no guard"
        fetch("-L", link)
        page = fetch(base + "/agent?name=coder")
        assert "User is Ada." in page, page[:2000]
        csrf = page.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        form = ["-H", f"Origin: {base}", "-d", f"csrf={csrf}", "-d", "name=coder"]
        fetch(*form, "-d", "content=Added in the console.", base + "/agent/add")
        assert "Added in the console." in fetch(base + "/agent?name=coder")
    finally:
        console.send_signal(signal.SIGINT)
        assert console.wait(timeout=30) == 0, "the console did not stop cleanly on Ctrl-C"


def main() -> None:
    wheel = Path(sys.argv[1])
    check_wheel(wheel)
    with tempfile.TemporaryDirectory(prefix="oryxmem-smoke-") as scratch:
        base = Path(scratch)
        root, elsewhere, home = base / "ws", base / "elsewhere", base / "home"
        for folder in (root, elsewhere, home):
            folder.mkdir()
        (elsewhere / "oryxmem.py").write_text("raise SystemExit('the folder ran its own code')\n")
        sock = Path(tempfile.mkdtemp(prefix="oxsmoke-", dir="/tmp")) / "s.sock"
        env = {
            **os.environ,
            "ORYXMEM_ROOT": str(root),
            "ORYXMEM_SOCKET": str(sock),
            "ORYXMEM_AUTOSTART": "0",
            "HOME": str(home),
        }
        os.chdir(elsewhere)
        run("init", env=env)
        log = open(base / "daemon.log", "w")  # noqa: SIM115 (the daemon writes it until stopped)
        daemon = subprocess.Popen([ORYXMEM, "daemon"], env=env, stdout=log, stderr=log)
        try:
            deadline = time.monotonic() + 120
            while not sock.exists():
                if daemon.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit((base / "daemon.log").read_text())
                time.sleep(0.1)
            say("the daemon serves")
            url = "http://x/api/v1/agents/coder"
            curl(
                sock,
                "-d",
                '{"content": "User likes green tea.", "scope": "archival"}',
                f"{url}/memory",
            )
            curl(sock, "-d", '{"content": "User is Ada.", "scope": "core"}', f"{url}/memory")
            assert "green tea" in json.dumps(curl(sock, f"{url}/memory/recall?keyword=tea"))
            hits = curl(sock, f"{url}/memory/search?q=what+does+the+user+drink")["hits"]
            assert isinstance(hits, list) and hits and "green tea" in json.dumps(hits[0]), hits
            assert "User is Ada." in str(curl(sock, f"{url}/context")["context"])
            prompt = curl(sock, f"{url}/prompt?query=tea")
            assert "green tea" in str(prompt["memory"]) and prompt["tools"], prompt
            say("save, recall, search, context and prompt over the socket")

            run(
                "mcp",
                "install",
                "--client",
                "claude-code",
                "--scope",
                "user",
                "--agent",
                "coder",
                env=env,
            )
            server = json.loads((home / ".claude.json").read_text())["mcpServers"]["oryxmem"]
            said = mcp_round_trip(server["command"], server["args"], env, elsewhere)
            assert "oolong" in said, said
            say("a tool call through `oryxmem mcp`, registered and started as a host does")

            start = json.dumps({"session_id": "s1", "hook_event_name": "SessionStart"})
            out = run("hook", "session-start", "--agent", "coder", env=env, stdin=start)
            context = json.loads(out)["hookSpecificOutput"]["additionalContext"]
            assert "User is Ada." in context, out
            say("the session-start hook")

            console_round_trip(env)
            say("the console: signed in by its link, a page, a change through its form")
        finally:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=60)
            log.close()
        if daemon.returncode != 0 or "Traceback" in (base / "daemon.log").read_text():
            raise SystemExit((base / "daemon.log").read_text())

        run("config", "set", "memory.backend", "mem0", env=env)
        for command in (["daemon"], ["show", "--agent", "coder"], ["save", "x"]):
            lines = run(*command, env=env, code=1).strip().splitlines()
            assert len(lines) == 1 and "pip install 'oryxmem[mem0]'" in lines[0], lines
        say("memory.backend = mem0 without the extra: one line, exit 1")
    say("passed")


if __name__ == "__main__":
    main()
