"""The model-based soak test against the real daemon (see soak.py for what it plays).

The default suite runs a short, fixed sequence. ``ORYXMEM_SOAK=1`` runs for
``ORYXMEM_SOAK_SECONDS`` (default 1800) with a random seed, printed first and in
any failure; ``ORYXMEM_SOAK_SEED=<seed> ORYXMEM_SOAK_STEPS=<steps>`` replays one.
Either runs on a busy machine: ``ORYXMEM_SOAK_LOAD`` processes spin beside it the whole
time (by default two per core for a long run, one for the suite's short one).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest
from support.soak import Soak
from support.sync import cpu_load

from oryxmem.workspace import Workspace

SHORT_STEPS = 60
LONG_RUN = os.environ.get("ORYXMEM_SOAK") == "1"
LONG_SECONDS = float(os.environ.get("ORYXMEM_SOAK_SECONDS", "1800"))


@pytest.mark.timeout(LONG_SECONDS + 900 if LONG_RUN else 300)
def test_soak(workspace: Workspace, tmp_path: Path) -> None:
    long_run = LONG_RUN
    seed_text = os.environ.get("ORYXMEM_SOAK_SEED")
    # Not the random module: test plugins seed it, and every long run would be the same.
    seed = int(seed_text) if seed_text else (secrets.randbelow(2**31) if long_run else 20261130)
    print(f"soak seed {seed} (replay: ORYXMEM_SOAK_SEED={seed})")
    logs = tmp_path / "logs"
    logs.mkdir()
    soak = Soak(workspace, logs, seed)
    load = os.environ.get("ORYXMEM_SOAK_LOAD")
    # the short run shares the machine with the rest of the suite: one spinner is load enough
    spinners = int(load) if load else (2 * (os.cpu_count() or 1) if long_run else 1)
    with cpu_load(spinners):
        play(soak, long_run)
    print(f"soak seed {seed}: {len(soak.steps)} steps, {dict(soak.stats)}")
    assert soak.stats["settles"] >= 1


def play(soak: Soak, long_run: bool) -> None:
    soak.start()
    try:
        steps = os.environ.get("ORYXMEM_SOAK_STEPS")  # replay a failure up to its step
        if steps:
            soak.run(steps=int(steps))
        elif long_run:
            soak.run(seconds=LONG_SECONDS)
        else:
            soak.run(steps=SHORT_STEPS)
    finally:
        soak.stop()
