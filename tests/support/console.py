"""Run the real console (``oryxmem console --no-browser``) as a subprocess, and talk to
it over HTTP as a browser would, or as a hostile page would."""

from __future__ import annotations

import http.client
import os
import re
import signal
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from oryxmem.workspace import Workspace
from support.daemon import RunningDaemon


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: str


@dataclass
class RunningConsole:
    proc: subprocess.Popen[str]
    url: str  # the link it printed, token and all
    cookie: str = ""
    csrf: str = ""
    errors: list[str] = field(default_factory=list)

    @property
    def port(self) -> int:
        return int(urllib.parse.urlsplit(self.url).port or 0)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def token(self) -> str:
        return urllib.parse.parse_qs(urllib.parse.urlsplit(self.url).query)["token"][0]

    def request(
        self,
        method: str,
        path: str,
        form: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
        cookie: bool = True,
    ) -> Reply:
        """One request; the Host header is 127.0.0.1:PORT unless ``headers`` says."""
        sent = {"Host": f"127.0.0.1:{self.port}", **(headers or {})}
        if cookie and self.cookie:
            sent["Cookie"] = self.cookie
        body = None
        if form is not None:
            body = urllib.parse.urlencode(form)
            sent["Content-Type"] = "application/x-www-form-urlencoded"
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            connection.request(method, path, body=body, headers=sent)
            answer = connection.getresponse()
            text = answer.read().decode("utf-8", "replace")
            return Reply(answer.status, {k.lower(): v for k, v in answer.getheaders()}, text)
        finally:
            connection.close()

    def fresh(self) -> RunningConsole:
        """The same console, as a browser that has not signed in yet."""
        return RunningConsole(self.proc, self.url)

    def sign_in(self) -> None:
        """Exchange the token for the cookie, and read the CSRF token a page carries."""
        reply = self.request("GET", "/?token=" + self.token, cookie=False)
        assert reply.status == 303, reply
        self.cookie = reply.headers["set-cookie"].split(";")[0]
        page = self.request("GET", "/agent?name=")
        found = re.search(r'name="csrf" value="([^"]+)"', page.body)
        if found:
            self.csrf = found.group(1)

    def post(self, path: str, form: dict[str, str], origin: str | None = None) -> Reply:
        """A change as the console's own page makes it (its Origin, its CSRF token)."""
        headers = {"Origin": origin if origin is not None else self.base}
        return self.request("POST", path, {"csrf": self.csrf, **form}, headers)


def start_console(
    workspace: Workspace, log: Path, env: dict[str, str] | None = None
) -> RunningConsole:
    env = {**os.environ, "ORYXMEM_ROOT": str(workspace.root), **(env or {})}
    proc = subprocess.Popen(
        [sys.executable, "-m", "oryxmem", "console", "--no-browser", "--port", "0"],
        cwd=str(log.parent),
        env=env,
        stdout=subprocess.PIPE,
        stderr=log.open("w"),
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line.startswith("http://127.0.0.1:"):
        proc.kill()
        raise AssertionError(f"the console's first line: {line!r}; its log: {log.read_text()}")
    return RunningConsole(proc, line)


@contextmanager
def console(
    workspace: Workspace, log: Path, env: dict[str, str] | None = None
) -> Iterator[RunningConsole]:
    running = start_console(workspace, log, env)
    try:
        yield running
    finally:
        running.proc.send_signal(signal.SIGINT)
        try:
            code = running.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            running.proc.kill()
            code = running.proc.wait()
    assert code == 0, log.read_text()  # Ctrl-C stops it, cleanly
    assert "Traceback" not in log.read_text(), log.read_text()


# A MEMORY.md as a cloned repository may bring it: markup, a script link, a bidi
# override, a terminal's title sequence.
CLONED = (
    "## 核心记忆\n- [2026-11-01 09:00:00] The user's name is Ada.\n\n## 归档记忆\n"
    "- [2026-11-02 09:00:00] <script>alert(1)</script> <img src=x onerror=alert(2)>"
    " [x](javascript:alert(3)) \u202egnp.exe\n"
    "- [2026-11-03 09:00:00] a title change \x1b]0;owned\x07 here\n"
)


def clone_in(workspace: Workspace, agent: str = "coder") -> None:
    path = workspace.memory_path(agent)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(CLONED, encoding="utf-8")


@dataclass
class Served:
    workspace: Workspace
    daemon: RunningDaemon
    console: RunningConsole
    env: dict[str, str]
