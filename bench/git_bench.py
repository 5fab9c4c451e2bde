"""Git benchmark (issue 24): the merge driver on a large MEMORY.md, and how long two
clones with daemons take to agree after a save.

- merge: ``oryxmem merge-driver`` as git runs it (a new process), on a base of
  --git-entries archival entries, each side with 500 entries of its own and 100 of the
  base's removed, with and without tombstones; and the merge function alone;
- secrets: what the save-time credential check (detect-secrets) costs a save, on a
  sentence and on the eval's conversation turns (--data);
- converge: a bare remote and two clones, each with a daemon syncing every 2 s
  (``sync.git.interval_seconds``); a save on one, timed until the other's MEMORY.md has
  it, --git-rounds times.

Run: python -m bench.git_bench [--git-entries 100000] [--git-rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from bench import locomo
from bench.common import Figure, at_most, run_alone, scratch_dir, start_oryxmem, stop
from oryxmem.launch import oryxmem_command
from oryxmem.store import tombstones
from oryxmem.store.format import parse, render_entry_line

ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@example.com",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@example.com",
}


def options(parser: argparse.ArgumentParser) -> None:
    locomo.data_option(parser)
    parser.add_argument("--git-entries", type=int, default=100_000, help="entries merged")
    parser.add_argument("--git-rounds", type=int, default=5, help="saves timed to converge")


def main(argv: list[str] | None = None) -> list[Figure]:
    return run_alone("git benchmark", __doc__, options, run, argv)


def memory_text(entries: list[tuple[str, str]]) -> str:
    lines = ["## 核心记忆\n", "- [2026-01-01 00:00:00] the user is Ada\n", "## 归档记忆\n"]
    return "".join(lines + [render_entry_line(ts, text) + "\n" for ts, text in entries])


def stamp(n: int) -> str:
    day = f"2026-{1 + n // 2_500_000:02d}-{1 + n // 86400 % 28:02d}"
    return f"{day} {n // 3600 % 24:02d}:{n // 60 % 60:02d}:{n % 60:02d}"


def merge_figures(entries: int, folder: Path) -> list[Figure]:
    base = [(stamp(n), f"entry {n} about the project and its tests") for n in range(entries)]
    ours = base[100:] + [(stamp(entries + n), f"ours {n}") for n in range(500)]
    theirs = base[:-100] + [(stamp(entries + n), f"theirs {n}") for n in range(500)]
    texts = {name: memory_text(side) for name, side in (("O", base), ("A", ours), ("B", theirs))}
    target = folder / ".oryxos" / "agents" / "coder"
    target.mkdir(parents=True)
    doc = parse(texts["O"])
    stones = {
        entry.entry_id: tombstones.Stone("2026-01-01T00:00:00Z", entry.ts or "-")
        for entry in doc.archival[200:1200]
    }
    timings: dict[str, list[float]] = {"driver": [], "tombstoned": [], "function": []}
    for _ in range(3):
        for kind in ("driver", "tombstoned"):
            (target / "TOMBSTONES").unlink(missing_ok=True)
            if kind == "tombstoned":
                (target / "TOMBSTONES").write_text(tombstones.render(stones))
            for name, text in texts.items():
                (folder / name).write_text(text)
            started = time.perf_counter()
            subprocess.run(
                oryxmem_command("merge-driver", "O", "A", "B", ".oryxos/agents/coder/MEMORY.md"),
                cwd=folder,
                check=True,
            )
            timings[kind].append((time.perf_counter() - started) * 1000)
        from oryxmem.sync.merge import merge_memory

        started = time.perf_counter()
        merge_memory(texts["O"], texts["A"], texts["B"])
        timings["function"].append((time.perf_counter() - started) * 1000)
    at = f"{entries:,}"
    return [
        Figure(
            f"git: merge-driver on {at} entries (a process), median",
            statistics.median(timings["driver"]),
            "ms",
            at_most(1000, 24, "ms"),
        ),
        Figure(
            f"git: merge-driver on {at} entries with 1,000 tombstones, median",
            statistics.median(timings["tombstoned"]),
            "ms",
            at_most(1000, 24, "ms"),
        ),
        Figure(f"git: the merge alone on {at} entries", min(timings["function"]), "ms"),
    ]


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, env=ENV, check=True, capture_output=True)


def converge_figures(rounds: int, folder: Path) -> list[Figure]:
    folder.mkdir(parents=True)
    remote = folder / "remote.git"
    git(folder, "init", "-q", "--bare", "-b", "main", str(remote))
    roots = [folder / "a", folder / "b"]
    git(folder, "clone", "-q", str(remote), str(roots[0]))
    git(roots[0], "checkout", "-q", "-b", "main")

    def cli(root: Path, *args: str) -> None:
        subprocess.run(
            oryxmem_command("--root", str(root), *args),
            check=True,
            capture_output=True,
            env=ENV,
        )

    cli(roots[0], "init", "--git")
    cli(roots[0], "save", "-a", "coder", "the first entry")
    git(roots[0], "add", "-A")
    git(roots[0], "commit", "-qm", "base")
    git(roots[0], "push", "-q", "origin", "main")
    git(folder, "clone", "-q", "-b", "main", str(remote), str(roots[1]))
    cli(roots[1], "git", "setup")
    daemons = []
    for index, root in enumerate(roots):
        cli(root, "config", "set", "sync.git.remote", "origin")
        cli(root, "config", "set", "sync.git.interval_seconds", "2")
        sock = f"/tmp/oryxmem-bench-git-{os.getpid()}-{index}.sock"
        env = {**ENV, "ORYXMEM_SOCKET": sock}
        daemons.append(
            (start_oryxmem(["daemon"], root, root / "daemon.log", b"serving", env), sock)
        )
    waits = []
    try:
        other = roots[1] / ".oryxos" / "agents" / "coder" / "MEMORY.md"
        for n in range(rounds):
            text = f"converge round {n}"
            body = json.dumps({"content": text})
            subprocess.run(
                [
                    "curl",
                    "-s",
                    "--unix-socket",
                    daemons[0][1],
                    "-X",
                    "POST",
                    "-d",
                    body,
                    "http://x/api/v1/agents/coder/memory",
                ],
                check=True,
                capture_output=True,
            )
            started = time.monotonic()
            while text not in (other.read_text() if other.exists() else ""):
                if time.monotonic() - started > 120:
                    raise RuntimeError("the clones did not converge in 120 s")
                time.sleep(0.05)
            waits.append(time.monotonic() - started)
    finally:
        for proc, _ in daemons:
            stop(proc)
    return [
        Figure(
            "git: a save on one clone in the other's MEMORY.md (2 s interval), p50",
            statistics.median(waits),
            "s",
        ),
        Figure("git: the same, slowest", max(waits), "s"),
    ]


def secrets_figures(data: Path) -> list[Figure]:
    """What memory.secrets = refuse adds to a save: detect-secrets' quick look at its
    content, on a short sentence and on every turn of the eval's conversations (what an
    agent saves looks much like them); and, on the turns, the patterns' part of it with
    each pattern searched for only where its anchors are (oryxmem/anchors.py) against
    every pattern searched for (what it cost before anchors)."""
    from oryxmem import secrets

    sentences = [f"User prefers short answers about project {n} and its CI" for n in range(300)]
    turns = [turn.content for conversation in locomo.load(data) for turn in conversation.turns]
    secrets.checked_content(sentences[0], "refuse")  # the detector's settings, once
    candidates = secrets._candidates()
    assert candidates is not None, "detect-secrets' plugins are bounded by patterns"

    def every_pattern(text: str) -> bool:
        return any(pattern.search(text) for pattern in candidates.patterns)

    def p50_us(look: Callable[[str], object], texts: list[str]) -> float:
        times = []
        for text in texts:
            started = time.perf_counter()
            look(text)
            times.append((time.perf_counter() - started) * 1e6)
        return statistics.median(times)

    def check(text: str) -> str:
        return secrets.checked_content(text, "refuse")

    mean = statistics.mean(len(turn) for turn in turns)
    on_turns = f"secrets: the same, a conversation turn ({mean:.0f} chars on average), p50"
    return [
        Figure(
            "secrets: the check a save makes (a 55-char sentence), p50",
            p50_us(check, sentences),
            "us",
        ),
        Figure(on_turns, p50_us(check, turns), "us"),
        Figure("  its patterns, anchored, p50", p50_us(candidates.search.search, turns), "us"),
        Figure("  its patterns, every one searched, p50", p50_us(every_pattern, turns), "us"),
    ]


def run(args: argparse.Namespace) -> list[Figure]:
    figures_first = secrets_figures(args.data)
    with scratch_dir("oryxmem-git-") as folder:
        figures = merge_figures(args.git_entries, Path(folder) / "merge")
        figures += converge_figures(args.git_rounds, Path(folder) / "clones")
    return figures_first + figures


if __name__ == "__main__":
    main()
