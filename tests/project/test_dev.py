"""./dev as a newcomer runs it: one set-up at a time, and a demo that replaces a demo."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.sync import wait_until

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(sys.prefix)


def dev_env(**more: str) -> dict[str, str]:
    stamp = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()[:16]
    if not (VENV / f".installed-{stamp}").exists():
        pytest.skip("this Python is not a venv ./dev set up (its stamp is missing)")
    return {**os.environ, "ORYXMEM_VENV": str(VENV), **more}


def test_a_second_set_up_waits_for_the_first(tmp_path: Path) -> None:
    env = dev_env()
    with open(f"{VENV}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a set-up in progress
        waiting = subprocess.Popen(
            [str(ROOT / "dev"), "bench", "--help"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(1.0)
        assert waiting.poll() is None, "it went on while another set-up held the venv"
    assert waiting.wait(timeout=60) == 0


def demo(root: Path, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(
            [str(ROOT / "dev"), "demo"],
            env={**env, "ORYXMEM_DEMO_ROOT": str(root)},
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def serving_pid(root: Path, env: dict[str, str]) -> int | None:
    done = subprocess.run(
        [sys.executable, "-m", "oryxmem", "--root", str(root), "status", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    data = json.loads(done.stdout) if done.returncode == 0 else {}
    return int(data["pid"]) if data.get("status") == "ok" else None


def test_a_demo_started_while_the_last_one_runs_stops_it_first(tmp_path: Path) -> None:
    root = tmp_path / "demo"
    env = dev_env(ORYXMEM_SOCKET=os.environ["ORYXMEM_SOCKET"])
    env.pop("ORYXMEM_ROOT", None)
    first = demo(root, env, tmp_path / "first.log")
    second = None
    try:
        wait_until(lambda: serving_pid(root, env) is not None, timeout=120, step=0.3)
        old = serving_pid(root, env)
        second = demo(root, env, tmp_path / "second.log")
        assert first.wait(timeout=60) == 0, (tmp_path / "first.log").read_text()
        wait_until(lambda: serving_pid(root, env) not in (None, old), timeout=120, step=0.3)
        text = (root / ".oryxos" / "agents" / "coder" / "MEMORY.md").read_text()
        for line in ("Project uses Python 3.11 and uv.", "pinned pytest to 8.x"):
            assert text.count(line) == 1, text
        assert "stopping the demo daemon" in (tmp_path / "second.log").read_text()
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=30)
