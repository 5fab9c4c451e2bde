"""The console's guard, over real HTTP to a real console process talking to a real
daemon: who gets a page, which requests may change memory, the headers on every reply,
and memory text that stays text."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.console import RunningConsole, Served, clone_in, console
from support.daemon import daemon
from support.sync import sql, wait_until

from oryxmem.client import Client
from oryxmem.console.app import STATIC
from oryxmem.workspace import Workspace


def rows(workspace: Workspace) -> str:
    return sql(workspace, "SELECT content FROM memory_entries WHERE agent = 'coder'")


def test_no_cookie_no_page_and_no_memory_in_the_refusal(running: RunningConsole) -> None:
    for path in ("/", "/agent?name=coder", "/history", "/live?name=coder", "/health"):
        reply = running.request("GET", path)
        assert reply.status == 401, path
        assert "Ada" not in reply.body and "script" not in reply.body
    wrong = running.request("GET", "/?token=" + "x" * 43)
    assert wrong.status == 403 and "set-cookie" not in wrong.headers


def test_the_token_becomes_a_strict_httponly_cookie_and_leaves_the_url(
    running: RunningConsole,
) -> None:
    reply = running.request("GET", f"/agent?name=coder&token={running.token}")
    assert reply.status == 303
    assert reply.headers["location"] == "/agent?name=coder"
    cookie = reply.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
    assert running.token not in cookie
    running.cookie = cookie.split(";")[0]
    page = running.request("GET", "/agent?name=coder")
    assert page.status == 200 and "Ada" in page.body


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::1]"])
def test_a_loopback_host_with_the_port_is_served(running: RunningConsole, host: str) -> None:
    running.sign_in()
    reply = running.request("GET", "/", headers={"Host": f"{host}:{running.port}"})
    assert reply.status == 200


@pytest.mark.parametrize(
    "host",
    ["evil.example", "evil.example:{port}", "127.0.0.1", "127.0.0.1:1", "localhost.evil:{port}"],
)
def test_any_other_host_is_refused_as_dns_rebinding(running: RunningConsole, host: str) -> None:
    running.sign_in()
    reply = running.request(
        "GET", "/agent?name=coder", headers={"Host": host.format(port=running.port)}
    )
    assert reply.status == 403 and "Ada" not in reply.body


def test_a_change_needs_this_consoles_origin_and_csrf_token(
    running: RunningConsole, served: Served
) -> None:
    workspace = served.workspace
    running.sign_in()
    form = {"name": "coder", "content": "Stored by a cross-site post.", "scope": "archival"}
    refused = [
        running.post("/agent/add", form, origin="http://evil.example"),
        running.post("/agent/add", form, origin="null"),
        running.request("POST", "/agent/add", {"csrf": running.csrf, **form}),  # no Origin
        running.request("POST", "/agent/add", form, {"Origin": running.base}),  # no token
        running.request("POST", "/agent/add", {**form, "csrf": "forged"}, {"Origin": running.base}),
        running.request(  # the right form, no cookie: what SameSite=Strict leaves a cross-site post
            "POST",
            "/agent/add",
            {"csrf": running.csrf, **form},
            {"Origin": running.base},
            cookie=False,
        ),
    ]
    assert [reply.status for reply in refused] == [403, 403, 403, 403, 403, 401]
    assert "cross-site" not in workspace.memory_path("coder").read_text(encoding="utf-8")
    done = running.post("/agent/add", {**form, "content": "Stored from the console."})
    assert done.status == 303 and done.headers["location"] == "/agent?name=coder&done=saved"
    assert "Stored from the console." in workspace.memory_path("coder").read_text(encoding="utf-8")
    wait_until(lambda: "Stored from the console." in rows(workspace))  # the rows follow
    source = sql(workspace, "SELECT source FROM memory_history WHERE content LIKE 'Stored from%'")
    assert source.strip() == "console"


def test_every_reply_carries_the_security_headers_and_no_cors(running: RunningConsole) -> None:
    running.sign_in()
    replies = [
        running.request("GET", "/agent?name=coder"),
        running.request("GET", "/", cookie=False),  # a 401
        running.request("GET", "/", headers={"Host": "evil.example"}),  # a 403
        running.request("GET", "/static/console.js"),
        running.request("GET", "/no-such-page"),
        running.request("OPTIONS", "/agent?name=coder", headers={"Origin": "http://evil.example"}),
    ]
    for reply in replies:
        policy = reply.headers["content-security-policy"]
        assert "default-src 'self'" in policy and "frame-ancestors 'none'" in policy
        assert "unsafe-inline" not in policy
        assert reply.headers["x-frame-options"] == "DENY"
        assert not [h for h in reply.headers if h.startswith("access-control-")]


def test_pages_hold_no_inline_script_and_memory_text_is_only_text(running: RunningConsole) -> None:
    running.sign_in()
    page = running.request("GET", "/agent?name=coder").body
    assert re.findall(r"<script[^>]*>", page) == ['<script src="/static/console.js" defer>']
    assert " on" not in " ".join(re.findall(r"<[a-z][^>]*>", page)).replace("onsole", "")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;img src=x onerror=alert(2)&gt;" in page
    assert "<img" not in page and 'href="javascript' not in page
    assert "\u202e" not in page and "\\u202e" in page  # the bidi override, revealed
    assert "\x1b" not in page and "\\x1b" in page  # the terminal control too


def test_without_a_daemon_the_console_reads_and_refuses_changes(
    workspace: Workspace, tmp_path: Path
) -> None:
    clone_in(workspace)
    with console(workspace, tmp_path / "c.log") as c:
        with daemon(workspace, tmp_path / "daemon.log"):
            wait_until(lambda: c.request("GET", "/?token=" + c.token).status == 303)
            c.sign_in()
            saved = c.post("/agent/add", {"name": "coder", "content": "Saved while it ran."})
            assert saved.status == 303
        page = c.request("GET", "/agent?name=coder")  # the daemon has stopped
        assert page.status == 200 and "Saved while it ran." in page.body
        assert 'id="read-only"' in page.body and 'class="add"' not in page.body
        before = workspace.memory_path("coder").read_bytes()
        late = c.post("/agent/add", {"name": "coder", "content": "Not saved."})  # an old form
        assert late.status == 503 and "read-only" in late.body
        assert workspace.memory_path("coder").read_bytes() == before


def test_the_first_line_is_the_link_and_the_static_files_match_their_sums(
    running: RunningConsole,
) -> None:
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/\?token=[\w-]{40,}", running.url)
    sums = (STATIC / "SHA256SUMS").read_text().split("\n")
    for line in filter(None, sums):
        digest, name = line.split()
        assert hashlib.sha256((STATIC / name).read_bytes()).hexdigest() == digest, name
        served = running.request("GET", "/static/" + name)
        assert served.status == 200
        assert hashlib.sha256(served.body.encode()).hexdigest() == digest, name


def test_a_bad_argument_gets_a_clear_page_and_the_console_keeps_serving(
    running: RunningConsole,
) -> None:
    running.sign_in()
    assert running.request("GET", "/agent?name=../etc").status == 400
    assert running.request("GET", "/agent?name=coder&aoff=many").status == 400
    assert running.request("GET", "/session?id=nope").status == 404
    wait_until(lambda: running.request("GET", "/").status == 200)


def test_a_port_in_use_is_one_clear_line(running: RunningConsole, served: Served) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "oryxmem", "console", "--no-browser", "--port", str(running.port)],
        env={**os.environ, **served.env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        f"oryxmem: error: cannot serve the console on 127.0.0.1:{running.port}:"
        " Address already in use"
    ]


def test_without_javascript_a_forget_asks_on_a_page_of_its_own_first(
    running: RunningConsole, served: Served
) -> None:
    running.sign_in()
    with Client(Path(served.env["ORYXMEM_SOCKET"]), 30.0) as memory:
        entry = memory.save("coder", "Forget me after asking.")["entry"]["id"]
    path = served.workspace.memory_path("coder")
    form = {"name": "coder", "id": entry}
    asked = running.post("/agent/forget", form)
    assert asked.status == 200 and "Forget this entry of coder?" in asked.body
    assert "Forget me after asking." in asked.body and 'name="confirmed"' in asked.body
    assert "Forget me after asking." in path.read_text(encoding="utf-8")
    done = running.post("/agent/forget", {**form, "confirmed": "1"})
    assert done.status == 303 and done.headers["location"] == "/agent?name=coder&done=forgotten"
    assert "Forget me after asking." not in path.read_text(encoding="utf-8")
    again = running.post("/agent/forget", form)  # the page is stale now: a clear conflict
    assert again.status == 409 and "Nothing was overwritten" in again.body
