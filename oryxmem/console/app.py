"""``oryxmem console``: the console's web server, on 127.0.0.1 and nowhere else."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import sys
import webbrowser
from importlib.resources import files
from pathlib import Path

from aiohttp import web

from oryxmem.console.access import ConsoleMemory
from oryxmem.console.guard import GUARD, Guard, add_security_headers, guarded
from oryxmem.console.pages import MEMORY, WORKSPACE, error_pages, routes
from oryxmem.workspace import open_workspace

STATIC = Path(str(files("oryxmem.console") / "static"))


def make_app(memory: ConsoleMemory, guard: Guard, workspace: str) -> web.Application:
    app = web.Application(middlewares=[guarded, error_pages], client_max_size=256 * 1024)
    app[GUARD] = guard
    app[MEMORY] = memory
    app[WORKSPACE] = workspace
    app.add_routes(routes)
    app.router.add_static("/static/", STATIC, show_index=False, follow_symlinks=False)
    app.on_response_prepare.append(add_security_headers)
    return app


def bound_socket(port: int) -> socket.socket:
    """A listening socket on 127.0.0.1 (port 0: a free one)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    sock.setblocking(False)
    return sock


async def serve(root: str | None, port: int, open_browser: bool) -> None:
    workspace = open_workspace(root)
    sock = bound_socket(port)
    guard = Guard(port=sock.getsockname()[1])
    memory = ConsoleMemory(str(workspace.root))
    runner = web.AppRunner(make_app(memory, guard, str(workspace.root)), access_log=None)
    await runner.setup()
    site = web.SockSite(runner, sock)
    await site.start()
    print(guard.url(), flush=True)  # the first line on stdout: scripts read it
    live = await asyncio.get_running_loop().run_in_executor(None, memory.live)
    if not live:
        print("oryxmem console: no daemon serves this workspace: read-only", file=sys.stderr)
    if open_browser:
        with contextlib.suppress(webbrowser.Error):
            webbrowser.open(guard.url())
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
        memory.close()


def run_console(root: str | None, port: int, open_browser: bool) -> None:
    asyncio.run(serve(root, port, open_browser))
