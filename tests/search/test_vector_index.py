"""jobs/search/vector_index.py and jobs/store/index_kinds.py: the vectors' HNSW index over float32, halfvec
or bits, built, found, searched and re-ranked by float32 cosine, on the embedded PostgreSQL."""

import numpy as np
import pytest

from jobs.search import vector_index
from jobs.search.ranking import search_many
from jobs.store import index_kinds
from tests.factories import chunk_row, doc_row

DIM = 16


def _vectors(n: int, seed: int = 7) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=(n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _load(store, name: str, vectors: np.ndarray):
    coll = store.ensure_collection(name, "m", DIM)
    for i, v in enumerate(vectors):
        doc = doc_row(f"{name}-d{i}")
        store.mark_pending(name, "r1", [doc])
        store.commit_document(coll, doc, [chunk_row(doc["doc_id"], 0, f"text number {i} about cats", v, name)], "r1")
    return coll


@pytest.mark.parametrize("kind", ["halfvec", "binary"])
def test_an_index_of_each_kind_is_built_found_and_searched_with_true_cosines(store, kind):
    vectors = _vectors(60)
    coll = _load(store, f"vix_{kind}", vectors)
    assert store.ensure_hnsw_index(coll, kind=kind) is True
    assert store.hnsw_kind(coll) == kind
    assert store.ensure_hnsw_index(coll) is False  # a table keeps the index it has, whatever the setting
    query = vectors[17] + 0.05 * _vectors(1, seed=3)[0]
    truth = np.argsort(-(vectors @ query / np.linalg.norm(query)))[:5]
    [hits] = search_many(store, coll, [query], 5, ef_search=100)
    assert hits[0]["chunk_id"] == f"vix_{kind}-d17-0"
    expected = {f"vix_{kind}-d{i}-0": float(vectors[i] @ query / np.linalg.norm(query)) for i in truth}
    for hit in hits:  # the scores are float32 cosines, nearest first, not half-precision or Hamming ones
        if hit["chunk_id"] in expected:
            assert hit["score"] == pytest.approx(expected[hit["chunk_id"]], abs=1e-5)
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)
    [exact] = search_many(store, coll, [query], 5, exact=True)  # a flat float32 scan, whatever the index
    assert [h["chunk_id"] for h in exact] == [f"vix_{kind}-d{i}-0" for i in truth]
    [fused] = search_many(store, coll, [query], 3, queries=["cats"], mode="hybrid")
    assert fused[0]["chunk_id"] == f"vix_{kind}-d17-0"  # the words tie everywhere: the vectors decide


def test_the_index_key_and_query_of_each_kind():
    for kind in index_kinds.KINDS:
        assert index_kinds.value_bytes(kind, 384) <= 4 * 384 + 8
        assert vector_index.depth(kind, 10) >= 10
    assert index_kinds.value_bytes("halfvec", 384) < index_kinds.value_bytes("vector", 384) / 1.9
    with pytest.raises(ValueError, match="one of vector, halfvec, binary"):
        index_kinds.key("pq", 384)
