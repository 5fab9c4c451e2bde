"""A loopback server speaking the OpenAI chat completions API, for the digest's model.

No model runs here: it answers with a fixed digest that names how many lines it was
given. It can be told to answer slowly, to fail, or to send garbage of several kinds.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from support.loopback import JsonHandler, serving

GARBAGE = {
    "not-json": b"<html>busy</html>",
    "no-choices": b'{"error": "overloaded"}',
    "not-text": b'{"choices": [{"message": {"role": "assistant", "content": 42}}]}',
    "empty": b'{"choices": [{"message": {"role": "assistant", "content": "  "}}]}',
}


@dataclass
class Chat:
    mode: str = "ok"  # ok | slow | fail | controls | a key of GARBAGE
    requests: list[dict[str, object]] = field(default_factory=list)
    answered: int = 0  # requests it has finished answering (a slow one: 5 s after)


@contextmanager
def chat_server() -> Iterator[tuple[str, Chat]]:
    chat = Chat()

    class Handler(JsonHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            chat.requests.append(body)
            if self.path != "/v1/chat/completions":
                self.send_response(404)
                self.end_headers()
                return
            if chat.mode == "slow":
                time.sleep(5)
            chat.answered += 1
            if chat.mode == "fail":
                self.send_response(500)
                self.end_headers()
                self.wfile.write(b"the model crashed")
                return
            given = str(body["messages"][1]["content"]).splitlines()  # type: ignore[index]
            text = f"Model digest: {len(given)} kinds of older work, mostly test runs.\n## forged"
            if chat.mode == "controls":
                text = "\x1b]0;owned\x07Model digest with a terminal title in it"
            raw = (
                GARBAGE.get(chat.mode)
                or json.dumps(
                    {"choices": [{"message": {"role": "assistant", "content": text}}]}
                ).encode()
            )
            with contextlib.suppress(OSError):  # the client gave up on a slow answer
                self.send_json(200, raw)

    with serving(Handler) as url:
        yield url, chat
