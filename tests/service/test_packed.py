"""PackedVectors (index/packed.py): an agent's vectors as byte codes scanned by faiss."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from oryxmem.index.packed import SAMPLE, PackedVectors, faiss_module


def unit_rows(count: int, seed: int = 1, width: int = 384) -> np.ndarray:
    rng = np.random.default_rng(seed)
    rows = rng.standard_normal((count, width)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_the_best_rows_are_the_most_similar_and_scored_near_their_cosine() -> None:
    vectors = unit_rows(500)
    packed = PackedVectors()
    packed.take(list(range(1000, 1500)), vectors.astype(np.float16))
    query = vectors[7] + 0.3 * unit_rows(1, seed=9)[0]
    query /= np.linalg.norm(query)
    row_ids, scores = packed.best(query, 20)
    cosine = vectors @ query
    assert row_ids[0] == 1007
    assert len(row_ids) == 20 and list(scores) == sorted(scores, reverse=True)
    assert np.abs(scores - cosine[row_ids - 1000]).max() < 0.02
    exact = set((np.argsort(-cosine)[:20] + 1000).tolist())
    assert len(exact & set(row_ids.tolist())) >= 18


def test_forgotten_and_left_out_rows_are_never_found() -> None:
    vectors = unit_rows(200)
    packed = PackedVectors()
    packed.take(list(range(200)), vectors)
    query = vectors[3]
    near = packed.best(query, 40)[0][:30]  # the rows around row 3 (under a quarter)
    packed.forget(near[:20].tolist())
    assert packed.count == 180 and packed.used == 200  # masked, not compacted yet
    row_ids, _ = packed.best(query, 30, leave_out=near[20:25].tolist())
    assert len(row_ids) == 30
    assert not set(row_ids.tolist()) & set(near[:25].tolist())
    assert packed.best(query, 500)[0].size == 180


def test_a_row_taken_again_is_found_by_its_new_vector_and_ids_may_come_in_any_order() -> None:
    vectors = unit_rows(100)
    packed = PackedVectors()
    packed.take(list(range(50, 100)), vectors[50:])
    packed.take(list(range(0, 50)), vectors[:50])  # older ids after newer ones
    assert packed.count == 100
    assert packed.best(vectors[10], 1)[0].tolist() == [10]
    assert packed.best(vectors[90], 1)[0].tolist() == [90]
    packed.take([10], vectors[90:91])  # row 10 now says what row 90 says
    assert packed.count == 100
    assert set(packed.best(vectors[90], 2)[0].tolist()) == {10, 90}
    assert 10 not in packed.best(vectors[10], 5)[0].tolist()[:1]


def test_many_forgotten_rows_are_compacted_and_the_rest_still_found() -> None:
    vectors = unit_rows(400)
    packed = PackedVectors()
    packed.take(list(range(400)), vectors)
    packed.forget(list(range(0, 400, 3)))  # a third
    packed.take([1000], vectors[:1])  # the next take compacts
    assert packed.used == packed.count == 400 - 134 + 1
    assert packed.best(vectors[0], 1)[0].tolist() == [1000]
    assert packed.best(vectors[1], 1)[0].tolist() == [1]
    assert 3 not in packed.best(vectors[3], 50)[0].tolist()


def test_the_lowest_similarity_is_exact_while_every_row_is_sampled() -> None:
    vectors = unit_rows(300)
    packed = PackedVectors()
    packed.take(list(range(300)), vectors)
    query = vectors[0]
    cosine = vectors @ query
    assert packed.lowest(query) == pytest.approx(float(cosine.min()), abs=1e-6)
    worst = int(np.argmin(cosine))
    packed.forget([worst])
    rest = np.delete(cosine, worst)
    assert packed.lowest(query) == pytest.approx(float(rest.min()), abs=1e-6)
    second = int(np.argsort(cosine)[1])
    assert packed.lowest(query, leave_out=[second]) > float(rest.min())


def test_a_large_agent_is_sampled_and_its_lowest_estimated_from_below_the_best() -> None:
    vectors = unit_rows(SAMPLE * 2 + 100, width=32)
    packed = PackedVectors()
    for at in range(0, len(vectors), 1000):  # taken in pieces, as a bring-up reads them
        packed.take(list(range(at, min(at + 1000, len(vectors)))), vectors[at : at + 1000])
    query = vectors[5]
    cosine = vectors @ query
    lowest = packed.lowest(query)
    assert lowest is not None and float(cosine.min()) <= lowest < np.percentile(cosine, 1)


def test_a_search_runs_faiss_and_numpys_blas_on_one_thread() -> None:
    """A search's products are small: a BLAS pool left spinning after each took the
    processor from the model (packed.faiss_module). OpenMP counts threads per thread,
    so this holds on every thread that searches, not only the first (the daemon's
    second reader scanned on two)."""
    from threadpoolctl import threadpool_info

    def pools_after_asking() -> set[tuple[str, int]]:
        faiss_module()
        pools = [p for p in threadpool_info() if p["user_api"] in ("blas", "openmp")]
        assert any(p["user_api"] == "blas" for p in pools)  # numpy's at least
        return {(p["filepath"], p["num_threads"]) for p in pools}

    seen: list[set[tuple[str, int]]] = []
    for _ in range(2):  # each a new thread, after another has asked
        thread = threading.Thread(target=lambda: seen.append(pools_after_asking()))
        thread.start()
        thread.join(timeout=30)
    seen.append(pools_after_asking())
    assert len(seen) == 3
    assert all({threads for _, threads in pools} == {1} for pools in seen), seen


def test_a_large_agent_scanned_in_ranges_side_by_side_finds_what_one_scan_finds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import oryxmem.index.packed as packed_module

    vectors = unit_rows(3000)
    packed = PackedVectors()
    packed.take(list(range(3000)), vectors)
    packed.forget(list(range(0, 3000, 7)))  # masked rows in every range
    queries = [vectors[n] + 0.5 * unit_rows(1, seed=n)[0] for n in (5, 1499, 2998)]
    whole = [packed.best(query, 40, leave_out=[1500]) for query in queries]
    monkeypatch.setattr(packed_module, "SPLIT_ABOVE", 100)
    for parts in (2, 3):
        monkeypatch.setattr(packed_module, "SCAN_PARTS", parts)
        for query, (row_ids, scores) in zip(queries, whole, strict=True):
            split_ids, split_scores = packed.best(query, 40, leave_out=[1500])
            assert split_ids.tolist() == row_ids.tolist()
            assert np.allclose(split_scores, scores)
            assert 1500 not in split_ids and not (split_ids % 7 == 0).any()
