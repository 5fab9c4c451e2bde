"""LoCoMo-format conversations as oryxmem sees them: entries, sessions and questions.

Scored as ../shared/eval/README.md says: each conversation is one agent, each
dialog turn one archival entry ``"<speaker>: <text>"`` (plus ``[image: ...]``),
stamped with its session's date plus the turn's index in seconds; questions of
categories 1-4 with evidence, evidence ids split on ';', ``D:11:26`` read as
``D11:26``, ids that name no turn dropped.
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

DEFAULT_PATH = Path(__file__).resolve().parents[2] / "shared" / "eval" / "locomo-dev.json"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}


@dataclass(frozen=True)
class Turn:
    dia_id: str
    speaker: str
    content: str  # "<speaker>: <text>[ [image: <caption>]]"
    ts: str
    session: int


@dataclass(frozen=True)
class Question:
    text: str
    category: int
    evidence: frozenset[str]  # dia ids


@dataclass(frozen=True)
class Conversation:
    sample_id: str
    speakers: tuple[str, str]
    turns: list[Turn]
    questions: list[Question]

    def sessions(self) -> dict[int, list[Turn]]:
        grouped: dict[int, list[Turn]] = {}
        for turn in self.turns:
            grouped.setdefault(turn.session, []).append(turn)
        return grouped


def session_start(text: str) -> datetime:
    """'1:56 pm on 8 May, 2023' -> a datetime."""
    return datetime.strptime(text.replace("  ", " ").strip(), "%I:%M %p on %d %B, %Y")


def _evidence(raw: list[str], known: set[str]) -> frozenset[str]:
    ids = set()
    for item in raw:
        for part in item.split(";"):
            part = part.strip()
            match = re.fullmatch(r"D:?(\d+):(\d+)", part)
            if match:
                dia_id = f"D{match.group(1)}:{match.group(2)}"
                if dia_id in known:
                    ids.add(dia_id)
    return frozenset(ids)


def load(path: Path = DEFAULT_PATH) -> list[Conversation]:
    conversations = []
    for sample in json.loads(path.read_text(encoding="utf-8")):
        data = sample["conversation"]
        turns: list[Turn] = []
        number = 1
        while f"session_{number}" in data:
            start = session_start(data[f"session_{number}_date_time"])
            for index, turn in enumerate(data[f"session_{number}"]):
                content = f"{turn['speaker']}: {turn['text']}"
                if turn.get("blip_caption"):
                    content += f" [image: {turn['blip_caption']}]"
                ts = (start + timedelta(seconds=index)).strftime("%Y-%m-%d %H:%M:%S")
                turns.append(Turn(turn["dia_id"], turn["speaker"], content, ts, number))
            number += 1
        known = {turn.dia_id for turn in turns}
        questions = []
        for qa in sample["qa"]:
            if qa.get("category") not in CATEGORIES:
                continue
            evidence = _evidence(qa.get("evidence") or [], known)
            if evidence:
                questions.append(Question(str(qa["question"]), int(qa["category"]), evidence))
        speakers = (str(data["speaker_a"]), str(data["speaker_b"]))
        conversations.append(Conversation(sample["sample_id"], speakers, turns, questions))
    return conversations


def data_option(parser: argparse.ArgumentParser) -> None:
    """--data, the LoCoMo-format JSON (once: several benchmarks read it)."""
    if "--data" not in parser._option_string_actions:
        parser.add_argument("--data", type=Path, default=DEFAULT_PATH, help="LoCoMo-format JSON")
