"""jobs/search/filters.py: metadata and path filters in every search mode, on the embedded PostgreSQL
(pgvector 0.8's iterative index scans: a selective filter still fills k hits through the HNSW index)."""

import json

import numpy as np
import pytest

from jobs.errors import ConfigError
from jobs.search.filters import Filter, parse
from jobs.search.ranking import search_many
from tests.factories import chunk_row, doc_row

DIM = 8
TOPICS = ["kubernetes rolling update pods", "postgres vacuum autovacuum", "tomato garden watering"]


def _vector(i: int) -> np.ndarray:
    rng = np.random.default_rng(i)
    v = rng.normal(size=DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def _metadata(i: int) -> dict:
    meta = {"tags": ["ops", "rare"] if i % 100 == 7 else ["ops"], "year": 2020 + i % 5, "draft": i % 2 == 0}
    if i == 3:
        meta["owner"] = "50% team"
    if i == 5:
        meta["status"] = "inf"
    return meta


@pytest.fixture(scope="module")
def filtered(pg_url):
    """400 one-chunk documents under docs/ and notes/, every hundredth tagged `rare`, with their HNSW
    indexes built (vectors and BM25)."""
    from jobs.store.pgvector import PgStore

    with PgStore(pg_url) as store:
        store.migrate()
        coll = store.ensure_collection("filters", "m", DIM)
        for i in range(400):
            doc = dict(doc_row(f"d{i:03d}"), source_path=f"{'docs' if i % 2 else 'notes'}/d{i:03d}.md")
            row = chunk_row(doc["doc_id"], 0, f"page {i} about {TOPICS[i % 3]}", _vector(i), coll.name)
            row.update(source_path=doc["source_path"], metadata=json.dumps(_metadata(i)))
            store.mark_pending(coll.name, "r1", [doc])
            store.commit_document(coll, doc, [row], "r1")
        store.ensure_hnsw_index(coll)
        store.ensure_text_index(coll, after_load=True)
        yield store, coll


def _search(filtered, mode, filters, k=5, query="rolling update"):
    store, coll = filtered
    [hits] = search_many(store, coll, [_vector(10_000)], k, 40, queries=[query], mode=mode, filters=filters)
    return hits


@pytest.mark.parametrize("mode", ["vector", "text", "hybrid"])
def test_a_selective_filter_still_returns_k_hits_all_of_them_passing(filtered, mode):
    hits = _search(filtered, mode, parse(["tags=rare"]), k=3, query="page about")
    assert len(hits) == 3  # 4 of 400 chunks pass; ef_search 40 alone would mostly find none of them
    assert all("rare" in h["metadata"]["tags"] for h in hits)
    everything = _search(filtered, mode, None, k=3, query="page about")
    assert any("rare" not in h["metadata"]["tags"] for h in everything)


def test_values_match_as_written_numbers_booleans_lists_any_of_and_paths(filtered):
    def paths(*specs):
        return {h["source_path"] for h in _search(filtered, "vector", parse(list(specs)), k=400)}

    assert len(paths("year=2021")) == 80  # a number in the front matter, text in the filter
    assert len(paths("year=2021,2022")) == 160  # any of
    assert len(paths("year=2021", "draft=true")) == 40  # all of several keys: i % 10 == 6
    assert paths("path=notes/*") == {f"notes/d{i:03d}.md" for i in range(0, 400, 2)}
    assert paths("path=docs/d00?.md") == {"docs/d001.md", "docs/d003.md", "docs/d005.md", "docs/d007.md",
                                          "docs/d009.md"}
    assert paths("owner=50% team") == {"docs/d003.md"}  # a % in a value is a character, not a wildcard
    assert paths("tags=nothing-has-this") == set()
    # A value that spells a number JSON has no form for is text only, not a request the database refuses.
    assert paths("status=inf") == {"docs/d005.md"}
    assert paths("status=NaN", "year=1e999") == set()
    assert paths("missing=x") == set()


def test_the_exact_scan_honours_filters_too(filtered):
    store, coll = filtered
    [hits] = search_many(store, coll, [_vector(1)], 4, 40, exact=True, queries=["garden"], mode="hybrid",
                         filters=[Filter("tags", ("rare",))])
    assert len(hits) == 4 and all("rare" in h["metadata"]["tags"] for h in hits)


@pytest.mark.parametrize("spec", ["tags", "=x", "tags=", "tags=,"])
def test_a_filter_that_is_not_key_equals_value_is_a_config_error_naming_it(spec):
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse([spec])
