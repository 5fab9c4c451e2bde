"""A loopback server speaking the OpenAI embeddings API, for the openai-compatible embedder.

No model runs here: a text's vector is made from the words it holds (each word a
fixed random direction), so texts sharing words are close, as a real model's are.
It can be told to answer slowly, to hold every answer until released, to fail, or to
send garbage.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from support.loopback import JsonHandler, serving

DIM = 64


def fake_vector(text: str) -> list[float]:
    total = np.zeros(DIM)
    for word in text.lower().split():
        seed = int(hashlib.blake2b(word.encode(), digest_size=4).hexdigest(), 16)
        total += np.random.default_rng(seed).standard_normal(DIM)
    return [float(x) for x in total]


@dataclass
class Behaviour:
    mode: str = "ok"  # ok | fail | garbage | slow | held (until released is set)
    released: threading.Event = field(default_factory=threading.Event)
    requests: list[dict[str, object]] = field(default_factory=list)
    authorization: list[str | None] = field(default_factory=list)


@contextmanager
def embeddings_server() -> Iterator[tuple[str, Behaviour]]:
    behaviour = Behaviour()

    class Handler(JsonHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            behaviour.requests.append(body)
            behaviour.authorization.append(self.headers.get("Authorization"))
            if behaviour.mode == "slow":
                time.sleep(2)
            if behaviour.mode == "held":
                behaviour.released.wait(60)
            if behaviour.mode == "fail":
                self.send_response(500)
                self.end_headers()
                self.wfile.write(b"the model crashed")
                return
            if self.path != "/v1/embeddings":
                self.send_response(404)
                self.end_headers()
                return
            data = [
                {"object": "embedding", "index": i, "embedding": fake_vector(text)}
                for i, text in enumerate(body["input"])
            ]
            answer = (
                b"not json at all"
                if behaviour.mode == "garbage"
                else json.dumps({"object": "list", "data": data, "model": body["model"]}).encode()
            )
            self.send_json(200, answer)

    with serving(Handler) as url:
        yield url, behaviour
