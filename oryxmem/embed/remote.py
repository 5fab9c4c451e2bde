"""An OpenAI-compatible /v1/embeddings server the user runs: ollama, llama.cpp, vLLM.

recall.embedder = "openai-compatible", with recall.embedder_url (the server) and
recall.embedder_model; the API key, if one is needed, comes from the environment
variable recall.embedder_key_env names (never from config.toml, which is in git).
Nothing is sent anywhere unless the user configured it so.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import TYPE_CHECKING

from oryxmem.config import Config
from oryxmem.embed import Embedder, Kind
from oryxmem.errors import EmbedderUnavailableError, InvalidConfigError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

TIMEOUT_SECONDS = 30.0
BATCH = 64  # texts per request


class OpenAICompatible(Embedder):
    name = "openai-compatible"

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        self.url = str(config.get("recall.embedder_url")).rstrip("/")
        self.model = str(config.get("recall.embedder_model"))
        if not self.url.startswith(("http://", "https://")) or not self.model:
            raise InvalidConfigError(
                "recall.embedder = openai-compatible needs recall.embedder_url (http://...)"
                " and recall.embedder_model"
            )
        key_env = str(config.get("recall.embedder_key_env"))
        self._key = os.environ.get(key_env, "") if key_env else ""

    @property
    def model_id(self) -> str:
        return f"{self.url}#{self.model}"

    def embed(self, texts: Sequence[str], kind: Kind) -> npt.NDArray[np.float32]:
        import numpy as np

        rows: list[list[float]] = []
        for at in range(0, len(texts), BATCH):
            rows += self._request(list(texts[at : at + BATCH]))
        vectors = np.asarray(rows, dtype=np.float32).reshape(len(texts), -1)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        normalised: npt.NDArray[np.float32] = vectors / np.maximum(norms, 1e-12)
        return normalised

    def _request(self, texts: list[str]) -> list[list[float]]:
        base = self.url if self.url.endswith("/v1") else f"{self.url}/v1"
        body = json.dumps({"model": self.model, "input": texts}).encode()
        headers = {"Content-Type": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        request = urllib.request.Request(f"{base}/embeddings", body, headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as reply:
                answer = json.loads(reply.read())
            items = sorted(answer["data"], key=lambda item: item["index"])
            vectors = [[float(x) for x in item["embedding"]] for item in items]
        except (OSError, ValueError, KeyError, TypeError) as error:  # URLError is an OSError
            raise EmbedderUnavailableError(
                f"the embeddings server {base} did not answer as expected: {error}"
            ) from None
        if len(vectors) != len(texts) or len({len(v) for v in vectors}) != 1:
            raise EmbedderUnavailableError(
                f"the embeddings server {base} sent {len(vectors)} vectors for {len(texts)} texts"
            )
        return vectors
