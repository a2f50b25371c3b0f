import statistics

import numpy as np
import pytest
from psycopg import sql

from jobs.checks import index_metrics as index_metrics_module
from jobs.checks.index_metrics import index_metrics
from jobs.store import arrow_copy
from jobs.store.names import index_name
from tests.factories import chunk_row, doc_row, unit_vector

DIM = 8



_chunk, _doc = chunk_row, doc_row


def _unit(i, dim=DIM):
    return unit_vector(i, dim)


def _vec(*values, dim=DIM):
    v = np.zeros(dim, dtype=np.float32)
    v[:len(values)] = values
    return v


def _load(store, name, vectors, token_counts=None, dim=DIM, one_document=False):
    """One document per vector (a duplicate is a neighbour from another document), or with
    `one_document` a single document holding them all."""
    coll = store.ensure_collection(name, "m", dim)
    token_counts = token_counts or [20] * len(vectors)
    if one_document:
        chunks = [_chunk(name, i, f"text {i}", v, name, t) for i, (v, t) in enumerate(zip(vectors, token_counts))]
        store.commit_document(coll, _doc(name), chunks, "r1")
        return coll
    for i, (v, t) in enumerate(zip(vectors, token_counts)):
        store.commit_document(coll, _doc(f"{name}-d{i}"), [_chunk(f"{name}-d{i}", 0, f"text {i}", v, name, t)], "r1")
    return coll


def _distinct(n):
    return [_unit(i) for i in range(n)]


def test_two_identical_chunks_among_distinct_ones_give_the_exact_duplicate_rate(store):
    same = _vec(1, 2, 3)
    coll = _load(store, "qa_idx_dup", [*_distinct(6), same, same.copy()])
    m = index_metrics(store, coll)
    assert m["method"] == "exact"
    assert m["vectors"] == 8 and m["duplicate_checked"] == 8
    # each copy's nearest other chunk is its twin; the six basis vectors are orthogonal to each other
    assert m["duplicate_neighbours"] == 2
    assert m["duplicate_neighbour_rate"] == pytest.approx(2 / 8)
    assert m["empty_vectors"] == 0 and m["empty_vector_rate"] == 0.0
    assert m["near_duplicate_cosine"] == 0.995


@pytest.mark.parametrize("with_index", [False, True])
def test_look_alikes_within_one_document_are_no_duplicates(store, with_index):
    """Parts of one cut code block, rows of one table: near-identical to the embedder, not duplication.
    The same vectors in two documents are."""
    same = _vec(1, 2, 3)
    name = f"qa_idx_onedoc_{int(with_index)}"
    one = _load(store, name, [*_distinct(4), same, same.copy(), same.copy()], one_document=True)
    if with_index:
        store.ensure_hnsw_index(one)
    m = index_metrics(store, one, exact_below=1 if with_index else 5000)
    assert m["method"] == ("hnsw" if with_index else "exact")
    assert m["duplicate_checked"] == 7 and m["duplicate_neighbours"] == 0
    # a copy of the document under another id, lightly edited (an exact copy's text is stored once:
    # jobs/store/shared_text.py): each of its chunks has a twin in the other document
    store.commit_document(one, _doc(f"{name}-copy"), [_chunk(f"{name}-copy", i, f"text {i}, copied", v, name)
                                                      for i, v in enumerate([*_distinct(4), same, same, same])], "r1")
    m = index_metrics(store, one, exact_below=1 if with_index else 5000)
    assert m["duplicate_checked"] == 14 and m["duplicate_neighbours"] == 14


def test_near_duplicate_threshold_is_a_strict_cosine_cut(store):
    vectors = [
        _vec(1, 0), _vec(1, 0.045),          # cosine 0.99899: above 0.995
        _vec(0, 0, 1), _vec(0, 0, 1, 0.15),  # cosine 0.98894: below 0.995, above 0.98
        _vec(0, 0, 0, 0, 0, 1),
    ]
    coll = _load(store, "qa_idx_thresh", vectors)
    assert index_metrics(store, coll)["duplicate_neighbour_rate"] == pytest.approx(2 / 5)
    assert index_metrics(store, coll, near_duplicate_cosine=0.98)["duplicate_neighbour_rate"] == pytest.approx(4 / 5)


def test_empty_vectors_are_counted_and_kept_out_of_the_duplicate_computation(store):
    # Two zero vectors: their cosine distance is NaN (0/0), and PostgreSQL orders NaN above every number, so
    # `similarity > threshold` would be true and they would count as each other's duplicates if not excluded.
    # The tiny vector (norm 1e-8) points along e0 and would be a cosine-1.0 "duplicate" of it.
    zero = np.zeros(DIM, dtype=np.float32)
    tiny = _unit(0) * np.float32(1e-8)
    coll = _load(store, "qa_idx_empty", [*_distinct(4), zero, zero.copy(), tiny])
    m = index_metrics(store, coll)
    assert m["vectors"] == 7
    assert m["empty_vectors"] == 3
    assert m["empty_vector_rate"] == pytest.approx(3 / 7)
    assert m["duplicate_checked"] == 4  # only non-empty vectors are compared
    assert m["duplicate_neighbours"] == 0 and m["duplicate_neighbour_rate"] == 0.0


def test_lone_non_empty_vector_is_checked_and_not_a_duplicate(store):
    coll = _load(store, "qa_idx_lone", [_unit(0), np.zeros(DIM, dtype=np.float32)])
    m = index_metrics(store, coll)
    assert m["duplicate_checked"] == 1 and m["duplicate_neighbours"] == 0
    assert m["empty_vector_rate"] == pytest.approx(1 / 2)


def _spread(n):
    rng = np.random.default_rng(7)
    return [v.astype(np.float32) for v in rng.standard_normal((n, 32))]


def test_token_shares_distribution_and_warnings(store):
    # 50 chunks: 3 near-zero (< 8 tokens), 6 at or above 0.97 * 256 = 248.32 tokens, the rest in between
    tokens = [2, 7, 0] + [248, 249, 256, 256, 300, 250] + list(range(100, 141))
    coll = _load(store, "qa_idx_tokens", _spread(len(tokens)), tokens, dim=32)
    m = index_metrics(store, coll, token_limit=256)
    assert m["tokens"]["n"] == 50
    assert m["tokens"]["median"] == pytest.approx(statistics.median(tokens))
    assert m["tokens"]["p95"] == pytest.approx(float(np.percentile(tokens, 95)))  # linear = percentile_cont
    assert m["tokens"]["max"] == 300
    assert m["near_zero_share"] == pytest.approx(3 / 50)
    assert m["at_limit_share"] == pytest.approx(5 / 50)  # 248 < 248.32 is not at the limit
    assert m["token_limit"] == 256
    # 6% near-zero warns (> 2%); exactly 10% at the limit does not (> 10% does)
    assert len(m["warnings"]) == 1 and "fewer than 8 tokens" in m["warnings"][0] and "6.0%" in m["warnings"][0]

    m = index_metrics(store, coll, token_limit=250)  # threshold 242.5: six chunks, 12%
    assert m["at_limit_share"] == pytest.approx(6 / 50)
    assert any("250-token limit" in w and "12.0%" in w for w in m["warnings"])
    assert len(m["warnings"]) == 2


def test_without_token_limit_there_is_no_at_limit_share(store):
    tokens = [1] + [50] * 49  # 2% near-zero: at the threshold, no warning
    coll = _load(store, "qa_idx_nolimit", _spread(len(tokens)), tokens, dim=32)
    m = index_metrics(store, coll)
    assert m["at_limit_share"] is None and m["token_limit"] is None
    assert m["near_zero_share"] == pytest.approx(0.02)
    assert m["warnings"] == []


def test_hnsw_method_agrees_with_exact_on_a_small_collection(store):
    same = _vec(1, 2, 3)
    zero = np.zeros(DIM, dtype=np.float32)
    coll = _load(store, "qa_idx_hnsw", [*_distinct(5), same, same.copy(), zero])
    exact = index_metrics(store, coll)
    assert store.ensure_hnsw_index(coll) is True
    approx = index_metrics(store, coll, exact_below=1)
    assert exact["method"] == "exact" and approx["method"] == "hnsw"
    assert approx["duplicate_checked"] == exact["duplicate_checked"] == 7
    assert approx["duplicate_neighbours"] == exact["duplicate_neighbours"] == 2
    assert approx["duplicate_neighbour_rate"] == pytest.approx(2 / 7)
    assert approx["empty_vectors"] == 1


def test_hnsw_query_uses_the_index_when_the_planner_may_not_avoid_it(store):
    # On a tiny table the planner may prefer a flat scan; forbidding seq scans shows the query shape is one the
    # HNSW index can serve (an outer-row query vector in ORDER BY ... LIMIT 1), which is what large tables get.
    coll = _load(store, "qa_idx_plan", _distinct(6))
    store.ensure_hnsw_index(coll)
    table = sql.Identifier(store.schema, coll.chunk_table)
    stmt = sql.SQL("EXPLAIN SELECT nn.d FROM {t} AS a LEFT JOIN LATERAL (SELECT b.embedding <=> a.embedding AS d "
                   "FROM {t} AS b WHERE b.chunk_id <> a.chunk_id ORDER BY b.embedding <=> a.embedding LIMIT 1) nn "
                   "ON true").format(t=table)
    with store.conn.transaction():
        store.conn.execute("SET LOCAL enable_seqscan = off")
        plan = "\n".join(r[0] for r in store.conn.execute(stmt))
    assert index_name(coll.chunk_table, "hnsw") in plan


def test_hnsw_path_without_an_index_is_left_unmeasured_with_a_warning(store):
    coll = _load(store, "qa_idx_noindex", _distinct(3))
    m = index_metrics(store, coll, exact_below=1)
    assert m["method"] is None and m["duplicate_neighbour_rate"] is None
    assert any("HNSW index" in w for w in m["warnings"])
    assert m["vectors"] == 3 and m["empty_vector_rate"] == 0.0  # the rest is still measured


def test_empty_collection(store):
    coll = store.ensure_collection("qa_idx_none", "m", DIM)
    m = index_metrics(store, coll, token_limit=128)
    assert m["vectors"] == 0 and m["empty_vector_rate"] == 0.0
    assert m["duplicate_neighbour_rate"] == 0.0 and m["duplicate_checked"] == 0
    assert m["tokens"] == {"n": 0, "median": None, "p95": None, "max": None}
    assert m["near_zero_share"] == 0.0 and m["at_limit_share"] == 0.0
    assert m["warnings"] == []


def _pairs_collection(store, name, docs=100, per_doc=20, dim=64, copies=True):
    """`docs` documents of `per_doc` random chunks, committed together; every fifth document (1, 6, 11, …)
    repeats the vectors of the one before it (other texts): 2 × docs/5 documents' chunks are duplicates.
    One chunk in ten has 2 tokens (near zero). Without `copies` every document is its own."""
    rng = np.random.default_rng(7)
    coll = store.ensure_collection(name, "m", dim)
    heads, rows, previous = [], [], None
    for d in range(docs):
        vectors = previous if copies and d % 5 == 1 else rng.normal(size=(per_doc, dim)).astype(np.float32)
        doc = f"{name}-d{d}"
        heads.append(_doc(doc))
        rows += [_chunk(doc, i, f"{doc} text {i}", v, name, 2 if (d * per_doc + i) % 10 == 0 else 40)
                 for i, v in enumerate(vectors)]
        previous = vectors
    store.commit_documents(coll, heads, arrow_copy.rows_table(rows), "r1")
    store.conn.execute(f"ANALYZE corpusmill.{coll.chunk_table}")
    return coll, docs * per_doc, 2 * (docs // 5) * per_doc if copies else 0


def test_a_large_collection_is_measured_from_a_bounded_sample(store, monkeypatch):
    """Above SAMPLE_ROWS the figures come from a block sample of about that many rows (what the upkeep
    after a one-page edit into a large collection reads), the count of vectors stays exact, and the
    sampled shares stay near the whole table's."""
    coll, n, duplicates = _pairs_collection(store, "qa_idx_sampled")
    exact = index_metrics(store, coll, token_limit=512)
    assert exact["sampled"] == {"rows": None, "figures": [], "duplicate_probes": None}
    assert exact["near_zero_share"] == pytest.approx(0.1) and exact["duplicate_neighbour_rate"] == duplicates / n
    monkeypatch.setattr(index_metrics_module, "SAMPLE_ROWS", n // 4)
    m = index_metrics(store, coll, token_limit=512)
    assert m["vectors"] == n  # exact
    assert n // 10 < m["sampled"]["rows"] < n // 2 and "near_zero_share" in m["sampled"]["figures"]
    assert m["tokens"]["n"] == m["sampled"]["rows"]
    assert abs(m["near_zero_share"] - 0.1) < 0.05


def test_the_duplicate_rate_probes_a_bounded_sample_through_the_index(store, monkeypatch):
    coll, n, duplicates = _pairs_collection(store, "qa_idx_probes")
    store.ensure_hnsw_index(coll)
    monkeypatch.setattr(index_metrics_module, "HNSW_SAMPLE", n // 2)
    m = index_metrics(store, coll, exact_below=1)
    assert m["method"] == "hnsw"
    assert n // 4 < m["duplicate_checked"] < n and m["sampled"]["duplicate_probes"] == m["duplicate_checked"]
    assert abs(m["duplicate_neighbour_rate"] - duplicates / n) < 0.15


def test_probing_stops_once_the_rate_is_known_well_enough(store, monkeypatch):
    """Without duplicates the rate is known after PROBE_BATCH probes (the usual case: a one-page edit
    into a large collection pays 1,000 index searches, not 5,000); with many, every probe is spent."""
    monkeypatch.setattr(index_metrics_module, "PROBE_BATCH", 500)
    monkeypatch.setattr(index_metrics_module, "HNSW_SAMPLE", 2000)
    clean, _, _ = _pairs_collection(store, "qa_idx_clean", copies=False)
    store.ensure_hnsw_index(clean)
    m = index_metrics(store, clean, exact_below=1)
    assert m["duplicate_neighbours"] == 0 and m["duplicate_checked"] == 1000  # two batches: ±0.19% at 0 of 1,000
    dup, n, _ = _pairs_collection(store, "qa_idx_dups")
    store.ensure_hnsw_index(dup)
    m = index_metrics(store, dup, exact_below=1)
    assert m["duplicate_checked"] == n  # a rate near 0.4 is never known to ±0.25%: the whole sample
