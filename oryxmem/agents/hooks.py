"""``oryxmem hook <event>``: automatic memory for coding agents, run by the host.

The host (Claude Code, Codex, Gemini CLI) runs the hook with its JSON on stdin:

- ``session-start``: the agent's memory block, for the host to put in the context;
- ``prompt``: the few memories most relevant to the user's prompt (bounded);
- ``stop``: the footprint of the trigger (the user's message and the final reply),
  saved to the agent's archival memory, so nothing depends on the agent calling a tool.

Context goes out as the hosts' common JSON, ``{"hookSpecificOutput": {"hookEventName":
..., "additionalContext": ...}}``. A hook never breaks or slows the agent: it always
exits 0, prints nothing when it has nothing to say (an empty memory, nothing relevant,
input it does not understand, any error), never a traceback, and gives up after
DEADLINE s. With no daemon a hook answers from the files directly (the same locks) and
starts one in the background (launch.py), through which the next hooks go.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import signal
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from oryxmem.reach import Reach

if TYPE_CHECKING:
    from oryxmem.service import MemoryService
from oryxmem.store.transcripts import claude_message
from oryxmem.workspace import open_workspace, resolve_agent

EVENTS = ("session-start", "prompt", "stop")
DEADLINE = 5  # seconds for the whole hook; the hosts wait 10 (install.py)
CLIENT_TIMEOUT = 2.0
PROMPT_HITS = 5
PROMPT_CHARS = 1500  # the most a prompt hook adds to the context
# A session's kept prompt is read by its stop hook moments later; one a week old belongs to
# a session long over. A temp file of the write that keeps it lives for microseconds:
# one a minute old was left by a hook killed mid-write (its deadline, the host).
PROMPT_KEEP_SECONDS = 7 * 24 * 3600
PROMPT_TEMP_KEEP_SECONDS = 60
TRANSCRIPT_TAIL = 4 * 1024 * 1024  # bytes of the transcript read from its end
HOST_EVENT = {  # (client, event) -> the event name the host's JSON answer carries
    ("gemini", "session-start"): "SessionStart",
    ("gemini", "prompt"): "BeforeAgent",
}


@dataclass(frozen=True)
class Hook:
    event: str
    client: str
    root: str | None
    agent: str | None

    def run(self, payload: dict[str, Any], reach: Reach) -> str | None:
        """What to print (None: nothing)."""
        steps: dict[str, Callable[[dict[str, Any], Reach], str | None]] = {
            "session-start": self.session_start,
            "prompt": self.prompt,
            "stop": self.stop,
        }
        return steps[self.event](payload, reach)

    def answer(self, context: str) -> str | None:
        if not context.strip():
            return None
        default = {"session-start": "SessionStart", "prompt": "UserPromptSubmit"}[self.event]
        name = HOST_EVENT.get((self.client, self.event), default)
        output = {"hookEventName": name, "additionalContext": context}
        return json.dumps({"hookSpecificOutput": output}, ensure_ascii=False)

    def session_start(self, payload: dict[str, Any], reach: Reach) -> str | None:
        def local(service: MemoryService) -> dict[str, Any]:
            from oryxmem.payloads import context_data

            return context_data(service, self.agent)

        # Without a daemon the block is read from the files, and one is started: the
        # prompt hooks of this session will search through it.
        data = reach.call(lambda client: client.context(self.agent), local, needs_model=True)
        block = str(data["context"])
        if not any(line.startswith("- ") for line in block.splitlines()):
            return None  # an empty memory: two bare headings would say nothing
        return self.answer(f"Long-term memory (oryxmem):\n{block}")

    def prompt(self, payload: dict[str, Any], reach: Reach) -> str | None:
        prompt = payload.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            return None
        remember_prompt(self.root, payload, prompt)
        question = prompt[:2000]

        def local(service: MemoryService) -> dict[str, Any]:
            """No daemon: by words only. Loading the model would take longer than a hook
            may (and a signal cannot cut it short); the daemon started now has it for
            the next prompt."""
            from oryxmem.payloads import search_data

            return search_data(
                service.search(self.agent, question, limit=PROMPT_HITS, mode="keyword")
            )

        hits = reach.call(
            lambda client: client.search(self.agent, question, PROMPT_HITS, relevant=True),
            local,
            needs_model=True,
        )["hits"]
        lines: list[str] = []
        size = 0
        for hit in hits:
            line = str(hit["line"])
            if size + len(line) > PROMPT_CHARS:
                break
            lines.append(line)
            size += len(line) + 1
        if not lines:
            return None
        return self.answer("Memories that may bear on this (oryxmem):\n" + "\n".join(lines))

    def stop(self, payload: dict[str, Any], reach: Reach) -> str | None:
        user_message, reply = trigger_of(self.client, payload, self.root)
        if not user_message and not reply:
            return None
        reach.call(
            lambda client: client.trigger(self.agent, user_message, reply),
            lambda service: service.record_trigger(self.agent, user_message, reply),
        )
        return None


# --- what the hosts tell a hook -----------------------------------------------------


def trigger_of(client: str, payload: dict[str, Any], root: str | None) -> tuple[str, str]:
    """(the user's message, the final reply) of the turn that just ended."""
    if client == "gemini":
        return _text(payload.get("prompt")), _text(payload.get("prompt_response"))
    user_message, reply = "", _text(payload.get("last_assistant_message"))
    transcript = payload.get("transcript_path")
    if client == "claude-code" and isinstance(transcript, str) and transcript:
        user_message, from_transcript = claude_turn(Path(transcript))
        reply = reply or from_transcript
    return user_message or recalled_prompt(root, payload), reply


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def claude_turn(path: Path) -> tuple[str, str]:
    """The last prompt the user typed in a Claude Code transcript (JSONL; a tool result
    comes back as a user line too, and is not a prompt) and the text of the replies
    after it."""
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, size - TRANSCRIPT_TAIL))
            raw = handle.read()
    except OSError:
        return "", ""
    user_message, replies = "", list[str]()
    for line in raw.decode("utf-8", "replace").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # the first, cut line of the tail, or a line being written
        found = claude_message(record) if isinstance(record, dict) else None
        if found is None:
            continue
        role, text = found
        if role == "user":
            user_message, replies = text, []
        else:
            replies.append(text)
    return user_message, replies[-1] if replies else ""


# --- the prompt, kept for a host whose stop event does not carry it (Codex) ---------


def _prompt_path(root: str | None, payload: dict[str, Any]) -> Path | None:
    session = payload.get("session_id")
    if not isinstance(session, str) or not session:
        return None
    key = hashlib.sha256(session.encode("utf-8", "replace")).hexdigest()[:32]
    return open_workspace(root).run_dir / "hooks" / f"{key}.prompt"


def remember_prompt(root: str | None, payload: dict[str, Any], prompt: str) -> None:
    from oryxmem.fileio import atomic_write

    path = _prompt_path(root, payload)
    if path is not None:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        atomic_write(path, prompt.encode("utf-8", "replace"), default_mode=0o600)
        forget_old_prompts(path.parent, time.time())


def forget_old_prompts(folder: Path, now: float) -> None:
    """Remove the prompts of sessions long over, and the temp files of hooks killed while
    keeping one, so the folder holds only recent sessions' prompts. Housekeeping: a file
    it cannot look at or remove is left for the next time."""
    with os.scandir(folder) as entries:
        for entry in entries:
            if fnmatch.fnmatchcase(entry.name, "*.prompt"):
                keep = PROMPT_KEEP_SECONDS
            elif fnmatch.fnmatchcase(entry.name, ".*.prompt.*.tmp"):
                keep = PROMPT_TEMP_KEEP_SECONDS
            else:
                continue  # not ours to judge
            try:
                info = entry.stat(follow_symlinks=False)
                if stat.S_ISREG(info.st_mode) and now - info.st_mtime > keep:
                    os.unlink(entry.path)
            except OSError:
                continue  # removed by another hook meanwhile, or not ours to remove


def recalled_prompt(root: str | None, payload: dict[str, Any]) -> str:
    path = _prompt_path(root, payload)
    try:
        return path.read_text(encoding="utf-8") if path is not None else ""
    except (OSError, UnicodeDecodeError):
        return ""


# --- the process --------------------------------------------------------------------


def _give_up(signum: int, frame: Any) -> None:
    os._exit(0)  # past the deadline: the agent goes on without us


def main(hook: Hook, stdin: IO[str], stdout: IO[str], stderr: IO[str]) -> int:
    """Run one hook as the host runs it. Always 0."""
    signal.signal(signal.SIGALRM, _give_up)
    signal.alarm(DEADLINE)
    reach = Reach(hook.root, timeout=CLIENT_TIMEOUT)
    try:
        payload = json.loads(stdin.read() or "{}")
        if not isinstance(payload, dict):
            return 0
        agent = hook.agent or os.environ.get("ORYXMEM_AGENT") or None
        ref = resolve_agent(open_workspace(hook.root), agent)
        if ref.fell_back:  # an unsafe name: the global file, as everywhere
            stderr.write(f"oryxmem: warning: {ref.fallback_reason}; using the global file\n")
            agent = None
        text = Hook(hook.event, hook.client, hook.root, agent).run(payload, reach)
        if text:
            stdout.write(text + "\n")
    except Exception as error:  # a hook must never break the agent; say why, quietly
        stderr.write(f"oryxmem hook {hook.event}: {type(error).__name__}: {error}\n")
    finally:
        reach.close()
        signal.alarm(0)
    return 0
