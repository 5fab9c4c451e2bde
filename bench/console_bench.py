"""Console benchmark (issue 23): an agent's page and a search, over the console's own
HTTP, at --console-entries archival entries.

A real daemon and a real `oryxmem console` on a workspace seeded as search_bench seeds
it (entries of Zipf-drawn words, a random unit vector each, so the search's arms all
have their index). A client signed in with the console's link times, warm:

- the agent's page (both tables' first page, newest first): what a browser waits for;
- the same page with a search (``?q=``: hybrid search, then both tables);
- the live poll an open page makes every second (``/live``).

Run: python -m bench.console_bench [--console-entries 100000] [--console-calls 100]
"""

from __future__ import annotations

import argparse
import http.client
import os
import random
import statistics
import subprocess
import urllib.parse
from pathlib import Path

from bench.common import (
    Figure,
    at_most,
    percentile,
    run_alone,
    scratch_workspace,
    start_oryxmem,
    stop,
    time_calls,
)
from bench.search_bench import seed, sentences, zipf_words
from oryxmem.launch import oryxmem_command
from oryxmem.workspace import Workspace


class SignedIn:
    """One kept-alive connection to the console, with its cookie."""

    def __init__(self, link: str) -> None:
        parts = urllib.parse.urlsplit(link)
        self.port = int(parts.port or 0)
        self.connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        self.connection.request("GET", f"/?{parts.query}")
        answer = self.connection.getresponse()
        answer.read()
        assert answer.status == 303, answer.status
        self.cookie = answer.getheader("Set-Cookie", "").split(";")[0]

    def get(self, path: str) -> str:
        self.connection.request("GET", path, headers={"Cookie": self.cookie})
        answer = self.connection.getresponse()
        body = answer.read().decode()
        assert answer.status == 200, (answer.status, body[:500])
        return body


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--console-entries", type=int, default=100_000, help="the agent's archival entries"
    )
    parser.add_argument("--console-calls", type=int, default=100, help="requests timed per page")


def main(argv: list[str] | None = None) -> list[Figure]:
    return run_alone("console benchmark", __doc__, options, run, argv)


def run(args: argparse.Namespace) -> list[Figure]:
    with scratch_workspace("oryxmem-console-") as root:
        seed(Workspace(root), {"big": sentences(args.console_entries)})
        sock = Path(f"/tmp/oryxmem-bench-console-{os.getpid()}.sock")
        env = {**os.environ, "ORYXMEM_ROOT": str(root), "ORYXMEM_SOCKET": str(sock)}
        daemon = start_oryxmem(["daemon"], root, root / "daemon.log", b"serving", env)
        console = subprocess.Popen(
            oryxmem_command("console", "--no-browser"),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            assert console.stdout is not None
            client = SignedIn(console.stdout.readline().strip())
            rng = random.Random(11)
            queries = [" ".join(zipf_words(rng, rng.randint(2, 5))) for _ in range(50)]
            page = "/agent?name=big"
            for query in queries[:10]:  # warm: the model, the daemon's caches
                client.get(page + "&q=" + urllib.parse.quote(query))
            pages = time_calls(lambda: client.get(page), args.console_calls)
            asked = iter(queries * (args.console_calls // len(queries) + 1))
            searches = time_calls(
                lambda: client.get(page + "&q=" + urllib.parse.quote(next(asked))),
                args.console_calls,
            )
            polls = time_calls(lambda: client.get("/live?name=big"), args.console_calls)
        finally:
            console.terminate()
            console.wait(timeout=30)
            stop(daemon)
    at = f"{args.console_entries:,}"
    return [
        Figure(
            f"console: agent page at {at} entries, p50",
            statistics.median(pages),
            "ms",
            at_most(150, 23, "ms"),
        ),
        Figure(f"console: agent page at {at} entries, p99", percentile(pages, 0.99), "ms"),
        Figure(
            f"console: search page at {at} entries, p50",
            statistics.median(searches),
            "ms",
            at_most(50, 23, "ms"),
        ),
        Figure(f"console: search page at {at} entries, p99", percentile(searches, 0.99), "ms"),
        Figure("console: live poll, p50", statistics.median(polls), "ms"),
    ]


if __name__ == "__main__":
    main()
