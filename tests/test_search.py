"""jobs/search.py: queries embedded by the collection's own model, ranked in each mode, and the cap on
chunks per document, on the embedded PostgreSQL with the packaged MiniLM model."""

import pytest

from jobs.search import Searcher, per_document
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


def _hit(path, n):
    return {"chunk_id": f"{path}-{n}", "source_path": path}


def test_the_cap_takes_each_documents_best_chunks_first_then_the_rest_in_rank_order():
    hits = [_hit("a", 0), _hit("a", 1), _hit("a", 2), _hit("b", 0), _hit("a", 3), _hit("c", 0)]
    ids = lambda hs: [h["chunk_id"] for h in hs]  # noqa: E731
    assert ids(per_document(hits, 1, 4)) == ["a-0", "b-0", "c-0", "a-1"]
    assert ids(per_document(hits, 2, 4)) == ["a-0", "a-1", "b-0", "c-0"]
    assert ids(per_document(hits, 1, 10)) == ["a-0", "b-0", "c-0", "a-1", "a-2", "a-3"]  # nothing dropped
    assert per_document([], 1, 5) == []


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
def test_a_capped_search_returns_other_pages_before_a_pages_next_chunks(store, mode):
    coll = store.ensure_collection(f"search_cap_{mode}", MODEL, 384)
    plain = Searcher(store, coll.name, ef_search=100, mode=mode)
    for name, texts in PAGES.items():
        chunks = [chunk_row(name, i, t, None, coll.name) for i, t in enumerate(texts)]
        for c, v in zip(chunks, plain._encode([c["embed_text"] for c in chunks])):
            c["embedding"] = v
        store.mark_pending(coll.name, "r1", [doc_row(name)])
        store.commit_document(coll, doc_row(name), chunks, "r1")

    query = "how does a rolling update add and remove pods"
    uncapped = plain.search(query, 9)
    capped = Searcher(store, coll.name, ef_search=100, mode=mode, per_document=1).search(query, 4)
    pages = [h["source_path"] for h in capped]
    assert len(set(pages[:3])) == 3 and pages[3] == pages[0]  # three pages, then the best page's next chunk
    # The same chunks as uncapped, each page's in its own rank order.
    assert [h["chunk_id"] for h in capped] == [h["chunk_id"] for h in per_document(uncapped, 1, 4)]
    assert len(plain.search(query, 2)) == 2
