"""jobs/search/searcher.py: queries embedded by the collection's own model, ranked in each mode, and more pages
among the first hits unless one page clearly leads, on the embedded PostgreSQL with the packaged MiniLM
model."""

import pytest

from jobs.search import Searcher, diversify
from tests.factories import chunk_row, doc_row

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
# One long page about rolling updates, and two shorter pages that touch on them.
PAGES = {
    "rollout": ["A rolling update replaces pods a few at a time so the deployment keeps serving traffic.",
                "maxSurge sets how many extra pods a rolling update may add above the desired count.",
                "maxUnavailable sets how many pods a rolling update may take down at once.",
                "Pause a rolling update with kubectl rollout pause and resume it with kubectl rollout resume."],
    "strategies": ["A deployment's update strategy is either a rolling update or recreate."],
    "probes": ["Readiness probes tell a rolling update when a new pod can take traffic."],
}


def _hit(path, n, score):
    return {"chunk_id": f"{path}-{n}", "source_path": path, "score": score}


def test_a_pages_next_chunk_waits_unless_it_clearly_leads_the_next_pages_best():
    hits = [_hit("a", 0, 0.6), _hit("a", 1, 0.5), _hit("b", 0, 0.2), _hit("a", 2, 0.15), _hit("c", 0, 0.1)]
    ids = lambda hs: [h["chunk_id"] for h in hs]  # noqa: E731
    # a-1 (0.5) leads b-0 (0.2) by more than 2x: the detail question keeps its page's next passage.
    assert ids(diversify(hits, 2.0, 3)) == ["a-0", "a-1", "b-0"]
    # ...by less than 3x: b comes first. a-2 (0.15) waits for c-0 (0.1), then nothing is dropped.
    assert ids(diversify(hits, 3.0, 5)) == ["a-0", "b-0", "a-1", "c-0", "a-2"]
    assert ids(diversify(hits, 1e9, 5)) == ["a-0", "b-0", "c-0", "a-1", "a-2"]  # one chunk per page first
    assert ids(diversify(hits, 1.0, 5)) == ids(hits)  # plain rank order
    assert ids(diversify(hits, 2.0, 2, weights=[1, 1, 1, 1, 1])) == ["a-0", "b-0"]  # given weights rule
    assert diversify([], 2.0, 5) == []


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
def test_a_spread_search_returns_other_pages_before_a_pages_next_chunks(store, mode):
    coll = store.ensure_collection(f"search_cap_{mode}", MODEL, 384)
    plain = Searcher(store, coll.name, ef_search=100, mode=mode, repeat_ratio=None)
    for name, texts in PAGES.items():
        chunks = [chunk_row(name, i, t, None, coll.name) for i, t in enumerate(texts)]
        for c, v in zip(chunks, plain._encode([c["embed_text"] for c in chunks])):
            c["embedding"] = v
        store.mark_pending(coll.name, "r1", [doc_row(name)])
        store.commit_document(coll, doc_row(name), chunks, "r1")

    query = "how does a rolling update add and remove pods"
    plain_hits = plain.search(query, 9)
    spread = Searcher(store, coll.name, ef_search=100, mode=mode, repeat_ratio=1e9).search(query, 4)
    pages = [h["source_path"] for h in spread]
    assert len(set(pages[:3])) == 3 and pages[3] == pages[0]  # three pages, then the best page's next chunk
    # The same chunks as the plain ranking, each page's in its own order.
    weights = [1 / (2 + r) for r in range(1, 10)] if mode == "vector" else None
    assert [h["chunk_id"] for h in spread] == [h["chunk_id"] for h in diversify(plain_hits, 1e9, 4, weights)]
    ids = lambda hs: [h["chunk_id"] for h in hs]  # noqa: E731
    assert ids(Searcher(store, coll.name, ef_search=100, mode=mode, repeat_ratio=2.0).search(query, 1)) == ids(plain_hits[:1])
    # The scores shown order the list, page spreading or not.
    assert [h["score"] for h in spread] == sorted((h["score"] for h in spread), reverse=True)
    assert [h["rank"] for h in spread] == [1, 2, 3, 4]
    assert [h["chunk_id"] for h in plain.search(query, 2)] == [h["chunk_id"] for h in plain_hits[:2]]  # k cuts, never reorders


def test_a_further_chunk_placed_by_the_spreading_shows_its_weight_over_the_ratio():
    hits = [_hit("a", 0, 0.6), _hit("a", 1, 0.5), _hit("b", 0, 0.2)]
    assert [(h["chunk_id"], h["score"]) for h in diversify(hits, 2.0, 3)] == [("a-0", 0.6), ("a-1", 0.25), ("b-0", 0.2)]
    assert [(h["chunk_id"], h["score"]) for h in diversify(hits, 3.0, 3)] == [("a-0", 0.6), ("b-0", 0.2),
                                                                              ("a-1", 0.5 / 3)]
