"""A digest written by a model: ``summarize.llm_url``, an OpenAI-compatible chat server
(a local ollama, llama.cpp server, vLLM), given the offline digest's lines (digest.py).

Nothing is sent anywhere unless the user set that URL. The model's digest is kept
in this process, keyed by the server, the model and the lines it was given (which
change only when the older entries' biggest folds or the sampled positions do), so
it is asked once per digest, not per block. The block never waits longer than
``summarize.llm_timeout_seconds`` for it: a server that is slow, fails, or answers
with anything but text is the offline digest's turn, and is not asked again for
RETRY_SECONDS. What the model writes is prompt text: control characters are dropped,
its lines are indented (they cannot pass for a heading or an entry) and cut to the
digest's budget.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import threading
import time
import urllib.request
from dataclasses import dataclass

from oryxmem.config import Config
from oryxmem.digest import Digest

log = logging.getLogger("oryxmem.summarize")
RETRY_SECONDS = 60.0
MIN_CHARS = 20  # an answer shorter than this is no digest
INSTRUCTIONS = (
    "You compress an agent's older memory notes into a short digest for its prompt. Keep"
    " every distinct fact, decision, preference and recurring task (with how often and"
    " when, if given); drop repetition. Plain lines, no preamble, at most {chars}"
    " characters in all."
)
_CONTROLS = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


@dataclass(frozen=True)
class Server:
    url: str
    model: str
    key: str
    timeout: float

    @classmethod
    def of(cls, config: Config) -> Server | None:
        url = str(config.get("summarize.llm_url")).rstrip("/")
        if not url:
            return None
        key_env = str(config.get("summarize.llm_key_env"))
        return cls(
            url,
            str(config.get("summarize.llm_model")),
            os.environ.get(key_env, "") if key_env else "",
            float(config.get("summarize.llm_timeout_seconds")),
        )

    @property
    def endpoint(self) -> str:
        base = self.url if self.url.endswith("/v1") else f"{self.url}/v1"
        return f"{base}/chat/completions"


_WRITTEN: dict[str, list[str]] = {}  # what the model wrote, by what it was given
_FAILED: dict[str, float] = {}  # when a server may be asked again (monotonic)
_LOCK = threading.Lock()


def model_lines(server: Server, offline: Digest, max_chars: int) -> list[str] | None:
    """The digest as the model writes it (its note first), or None: use the offline one."""
    given = "\n".join(offline.texts)
    key = hashlib.sha256(f"{server.url}\n{server.model}\n{max_chars}\n{given}".encode()).hexdigest()
    with _LOCK:
        if key in _WRITTEN:
            return _WRITTEN[key]
        if _FAILED.get(server.url, 0.0) > time.monotonic():
            return None
    note = (
        f"(digest of the {offline.covered} earlier entries not shown whole, written by"
        f" {server.model or 'a model'}; recall_memory searches all of them)"
    )
    answer = _ask(server, given, max_chars - len(note) - 1)
    lines = _clean(answer, max_chars - len(note) - 1) if answer is not None else None
    with _LOCK:
        if lines is None:
            _FAILED[server.url] = time.monotonic() + RETRY_SECONDS
            return None
        _WRITTEN[key] = [note, *lines]
        return _WRITTEN[key]


def _ask(server: Server, given: str, chars: int) -> str | None:
    """The model's answer within the server's timeout, whatever happens (None: none)."""
    body = {
        "model": server.model,
        "messages": [
            {"role": "system", "content": INSTRUCTIONS.format(chars=chars)},
            {"role": "user", "content": given},
        ],
        "temperature": 0,
        "max_tokens": max(chars // 3, 64),
        "stream": False,
    }
    headers = {"Content-Type": "application/json"}
    if server.key:
        headers["Authorization"] = f"Bearer {server.key}"
    request = urllib.request.Request(
        server.endpoint, json.dumps(body).encode(), headers, method="POST"
    )
    result: list[str | None] = [None]

    def call() -> None:
        try:
            with urllib.request.urlopen(request, timeout=server.timeout) as reply:
                data = json.loads(reply.read(1 << 20))
            content = data["choices"][0]["message"]["content"]
            result[0] = content if isinstance(content, str) else None
        except (OSError, ValueError, KeyError, IndexError, TypeError) as error:
            log.warning("the digest model at %s did not answer as expected: %s", server.url, error)

    worker = threading.Thread(target=call, name="oryxmem-digest-model", daemon=True)
    worker.start()
    worker.join(server.timeout)  # a server that trickles its answer is not waited for either
    if worker.is_alive():
        log.warning("the digest model at %s took longer than %.0f s", server.url, server.timeout)
        return None
    return result[0]


def _clean(answer: str, chars: int) -> list[str] | None:
    """The model's text as indented prompt lines within chars; None when it is no text."""
    lines = [" ".join(_CONTROLS.sub(" ", line).split()) for line in answer.splitlines()]
    lines = [line for line in lines if line]
    if sum(len(line) for line in lines) < MIN_CHARS:
        return None
    out: list[str] = []
    room = chars
    for line in lines:
        shown = "  " + line
        if len(shown) + 1 > room:
            if room > 40:
                out.append(shown[: room - 2].rstrip() + "…")
            break
        out.append(shown)
        room -= len(shown) + 1
    return out or None
