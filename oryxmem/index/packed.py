"""One agent's vectors in memory: int8 codes scanned by faiss, and a float32 sample.

A million vectors of 384 floats are 1.5 GB as float32 and 768 MB as float16; as one
signed byte per component they are 384 MB, and faiss scans them with SIMD (its flat
scalar-quantizer index, QT_8bit_direct_signed) exactly, with no graph to build or
keep: a million in 39 ms on one core of this 2-core machine (faiss 1.15, AVX-512), so
a large agent is scanned in ranges side by side, 22 ms on two. (An approximate
index, HNSW, took
170 s to build a million here and found 37 % of the true ten best on clustered
vectors). A component is stored as round(x * scale), the scale set from the first
vectors taken so that their largest component maps to about 100 of the 127 a byte
holds; a query is quantised the same way. The scores of the best rows are then within
about 0.01 of their cosine, and the ten best are the same rows 99 % of the time
(measured on the dev set's 1,463 turns and 300 questions).

Search results are scaled by the cosine of the agent's least similar row
(normalised_top): that is read from a float32 sample of the rows (reservoir-sampled,
at most SAMPLE of them), which holds every row of an agent that has no more: exact
there, an estimate above.

Rows are found by id through two sorted arrays (id, position), not a dict: a dict of
a million ints is about 100 MB.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt

# Rows whose float32 copy the sample keeps: 6 MB at 384 components.
SAMPLE = 4096
# The first vectors' largest component maps to this code (of 127): room for later ones.
HEADROOM_CODE = 100.0
# An agent of more rows than this (a scan of about 2.5 ms on one core) is scanned in
# SCAN_PARTS ranges side by side, one per processor: faiss scans one query on one
# thread, and a million rows took 39 ms on one core here, 22 ms in two halves on two.
SPLIT_ABOVE = 65_536
SCAN_PARTS = min(os.cpu_count() or 1, 4)
_FAISS_LOCK = threading.Lock()
_FAISS: list[Any] = []
_SCANNERS: list[ThreadPoolExecutor] = []  # the threads that scan the ranges, made once
_LIMITED = threading.local()  # this thread has set faiss's and the BLAS's threads to one


def faiss_module() -> Any:
    """faiss, imported on first use (a search by meaning; the CLI's other commands never
    pay for it), scanning on the calling thread only: a search is one query, which faiss
    does not split across threads, and an OpenMP pool left spinning takes the processor
    from the rest of the daemon.

    The BLAS libraries loaded by then (numpy's, faiss's) are held to one thread as well:
    the products a search does (the sample's rows times the query) are too small to
    split, and the pool's threads, spinning after each, took the processor from the
    model's: at 10,000 entries a search took 13.5 ms p50, 8.6 ms with one thread.

    OpenMP keeps its number of threads per thread (faiss's OpenBLAS is built on it), so
    the limits are set on each thread that asks, the first time it does: set once, they
    held only on the thread that asked first, and the daemon's other reader scanned on
    two."""
    with _FAISS_LOCK:
        if not _FAISS:
            os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
            import faiss

            _FAISS.append(faiss)
        faiss = _FAISS[0]
    if not getattr(_LIMITED, "done", False):
        from threadpoolctl import threadpool_limits

        faiss.omp_set_num_threads(1)
        threadpool_limits(limits=1, user_api="blas")
        _LIMITED.done = True
    return faiss


def _scanners() -> ThreadPoolExecutor:
    with _FAISS_LOCK:
        if not _SCANNERS:
            _SCANNERS.append(ThreadPoolExecutor(SCAN_PARTS, thread_name_prefix="oryxmem-scan"))
        return _SCANNERS[0]


class PackedVectors:
    """An agent's embedded rows: grown at the end, forgotten rows masked until compacted."""

    def __init__(self) -> None:
        self.step = 0  # the last step of the index this copy has taken in
        self.scale = 0.0
        self._index: Any = None  # faiss IndexScalarQuantizer, made at the first take
        self._row_ids = np.zeros(0, np.int64)  # position -> row id
        self._alive = np.zeros(0, np.bool_)
        self.used = 0  # positions taken (forgotten ones count until compacted)
        self._ids = np.zeros(0, np.int64)  # live row ids, sorted ...
        self._places = np.zeros(0, np.int64)  # ... and their positions
        self._sample = _Sample()

    @property
    def count(self) -> int:
        """Live rows."""
        return len(self._ids)

    # --- finding rows by id -----------------------------------------------------------

    def positions(self, row_ids: Sequence[int] | npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The positions of those of these rows that are live here (in no order)."""
        if not len(row_ids) or not len(self._ids):
            return np.zeros(0, np.int64)
        wanted = np.asarray(row_ids, np.int64)
        at = np.minimum(np.searchsorted(self._ids, wanted), len(self._ids) - 1)
        found: npt.NDArray[np.int64] = self._places[at[self._ids[at] == wanted]]
        return found

    def _index_ids(self, row_ids: npt.NDArray[np.int64], places: npt.NDArray[np.int64]) -> None:
        """Add rows (none of them live here) to the sorted arrays."""
        order = np.argsort(row_ids, kind="stable")
        row_ids, places = row_ids[order], places[order]
        if not len(self._ids) or row_ids[0] > self._ids[-1]:  # new rows: newer ids, at the end
            self._ids = np.concatenate([self._ids, row_ids])
            self._places = np.concatenate([self._places, places])
            return
        at = np.searchsorted(self._ids, row_ids)
        self._ids = np.insert(self._ids, at, row_ids)
        self._places = np.insert(self._places, at, places)

    def _unindex_ids(self, row_ids: npt.NDArray[np.int64]) -> None:
        keep = ~np.isin(self._ids, row_ids, assume_unique=False)
        self._ids, self._places = self._ids[keep], self._places[keep]

    # --- changing ---------------------------------------------------------------------

    def forget(self, row_ids: Sequence[int] | npt.NDArray[np.int64]) -> None:
        places = self.positions(row_ids)
        if not len(places):
            return
        gone = self._row_ids[places]
        self._alive[places] = False
        self._unindex_ids(gone)
        self._sample.forget(gone)

    def take(
        self, row_ids: Sequence[int] | npt.NDArray[np.int64], vectors: npt.NDArray[Any]
    ) -> None:
        """Rows (again), their vectors in float16 or float32: written at the end."""
        if not len(row_ids):
            return
        self.forget(row_ids)
        floats = np.ascontiguousarray(vectors, dtype=np.float32)
        if self._index is None:
            self._start(floats)
        ids = np.asarray(row_ids, np.int64)
        self._reserve(self.used + len(ids))
        end = self.used + len(ids)
        self._index.add(self._codes(floats))
        self._row_ids[self.used : end] = ids
        self._alive[self.used : end] = True
        self._index_ids(ids, np.arange(self.used, end, dtype=np.int64))
        self._sample.take(ids, floats)
        self.used = end
        if self.used - self.count > self.used // 4:  # many forgotten: compact
            self.compact()

    def _start(self, floats: npt.NDArray[np.float32]) -> None:
        faiss = faiss_module()
        width = floats.shape[1]
        largest = float(np.abs(floats).max()) if floats.size else 0.0
        # Not below what a unit vector's components reach in practice (4 / sqrt(width)):
        # a first batch of one flat vector would leave no room for the others.
        largest = max(largest, 4.0 / np.sqrt(width))
        self.scale = HEADROOM_CODE / largest
        self._index = faiss.IndexScalarQuantizer(
            width, faiss.ScalarQuantizer.QT_8bit_direct_signed, faiss.METRIC_INNER_PRODUCT
        )

    def _codes(self, floats: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        coded: npt.NDArray[np.float32] = np.clip(floats * self.scale, -127.0, 127.0)
        return coded

    def _reserve(self, rows: int) -> None:
        if rows > len(self._row_ids):
            capacity = max(rows, self.used + self.used // 4, 64)  # +25%
            row_ids = np.zeros(capacity, np.int64)
            row_ids[: self.used] = self._row_ids[: self.used]
            alive = np.zeros(capacity, np.bool_)
            alive[: self.used] = self._alive[: self.used]
            self._row_ids, self._alive = row_ids, alive

    def compact(self) -> None:
        """Drop the forgotten rows' codes."""
        dead = np.flatnonzero(~self._alive[: self.used])
        if not len(dead):
            return
        faiss = faiss_module()
        self._index.remove_ids(faiss.IDSelectorBatch(dead.astype(np.int64)))
        keep = np.flatnonzero(self._alive[: self.used])
        self._row_ids = self._row_ids[keep].copy()
        self._alive = np.ones(len(keep), np.bool_)
        self.used = len(keep)
        order = np.argsort(self._row_ids, kind="stable")
        self._ids, self._places = self._row_ids[order], order.astype(np.int64)

    # --- searching ----------------------------------------------------------------------

    def best(
        self, query: npt.NDArray[np.float32], count: int, leave_out: Sequence[int] = ()
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        """The count live rows most similar to the query (but those left out), and their
        scores (about their cosine), best first."""
        if not self.count or count <= 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        faiss_module()  # this thread's limits (a search may scan on a thread of its own)
        skip = set(self.positions(leave_out).tolist())
        wanted = min(count, self.count - len(skip))
        asked = min(self.used, wanted + len(skip) + 16)
        coded = self._codes(np.ascontiguousarray(query, np.float32)[None, :])
        while True:
            scores, places = self._scan(coded, asked)
            keep = places >= 0
            keep[keep] &= self._alive[places[keep]]
            if skip:
                keep &= ~np.isin(places, list(skip))
            if keep.sum() >= wanted or asked >= self.used:
                break
            asked = min(self.used, asked * 2)  # forgotten rows were among the best
        places, scores = places[keep][:wanted], scores[keep][:wanted]
        similarity = (scores / (self.scale * self.scale)).astype(np.float32)
        return self._row_ids[places], similarity

    def _scan(
        self, coded: npt.NDArray[np.float32], count: int
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
        """The scores of the count best positions and those positions (-1: none), best
        first: one scan, or one per range of positions side by side for a large agent
        (faiss lets go of the GIL while it scans), their bests merged."""
        parts = SCAN_PARTS if self.used > SPLIT_ABOVE else 1
        if parts == 1:
            scores, places = self._index.search(coded, count)
            return scores[0], places[0]
        bounds = np.linspace(0, self.used, parts + 1).astype(np.int64).tolist()

        def scan(part: int) -> tuple[Any, Any]:
            faiss = faiss_module()  # (this thread's limits)
            chosen = faiss.IDSelectorRange(bounds[part], bounds[part + 1])
            params = faiss.SearchParameters(sel=chosen)  # (an older faiss holds no ref)
            scores, places = self._index.search(coded, count, params=params)
            return scores, places

        found = list(_scanners().map(scan, range(parts)))
        scores = np.concatenate([s[0] for s, _ in found])
        places = np.concatenate([p[0] for _, p in found])
        best = np.argsort(-scores, kind="stable")[:count]
        return scores[best], places[best]

    def lowest(self, query: npt.NDArray[np.float32], leave_out: Sequence[int] = ()) -> float | None:
        """The least cosine of the sampled rows to the query (of every row, when there are
        no more than SAMPLE); None: nothing is sampled."""
        return self._sample.lowest(query, leave_out)


class _Sample:
    """At most SAMPLE rows' float32 vectors, a uniform sample of the rows taken
    (reservoir sampling), less the ones forgotten since."""

    def __init__(self) -> None:
        self.row_ids = np.zeros(0, np.int64)
        self.vectors = np.zeros((0, 0), np.float32)
        self.seen = 0
        self._rng = np.random.default_rng(0)

    def take(self, row_ids: npt.NDArray[np.int64], floats: npt.NDArray[np.float32]) -> None:
        if not len(self.vectors):
            self.vectors = np.zeros((0, floats.shape[1]), np.float32)
        room = max(0, SAMPLE - len(self.row_ids))
        if room:
            self.row_ids = np.concatenate([self.row_ids, row_ids[:room]])
            self.vectors = np.concatenate([self.vectors, floats[:room]])
        first = min(room, len(row_ids))
        self.seen += first
        rest = len(row_ids) - first
        if rest:  # each later row replaces a random slot with chance SAMPLE / rows seen
            seen = self.seen + np.arange(1, rest + 1)
            slots = (self._rng.random(rest) * seen).astype(np.int64)
            chosen = np.flatnonzero(slots < len(self.row_ids))
            self.row_ids[slots[chosen]] = row_ids[first + chosen]
            self.vectors[slots[chosen]] = floats[first + chosen]
            self.seen += rest

    def forget(self, row_ids: npt.NDArray[np.int64]) -> None:
        gone = np.isin(self.row_ids, row_ids)
        if gone.any():
            self.row_ids, self.vectors = self.row_ids[~gone], self.vectors[~gone]

    def lowest(self, query: npt.NDArray[np.float32], leave_out: Sequence[int]) -> float | None:
        if not len(self.row_ids):
            return None
        similarity = self.vectors @ query
        if len(leave_out):
            similarity = similarity[~np.isin(self.row_ids, np.asarray(leave_out, np.int64))]
        return float(similarity.min()) if len(similarity) else None
