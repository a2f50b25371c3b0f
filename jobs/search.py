"""Query a collection: embed the query with the collection's own model, then rank by vector (pgvector's
HNSW index), by text (BM25 over the full-text column), both fused (jobs/store/text_search.py), or both
and the documents' outline vectors fused (`hybrid-doc`, jobs/store/doc_vectors.py); then more pages
among the first hits, unless one page clearly leads (`repeat_ratio`)."""

from __future__ import annotations

import logging

import psycopg

from jobs.store.filters import Filter
from jobs.store.pgvector import PgStore, UnknownCollection
from jobs.store.text_search import DEPTH, RRF_K

log = logging.getLogger(__name__)


def diversify(hits: list[dict], ratio: float, k: int, weights: list[float] | None = None) -> list[dict]:
    """The first k of `hits` (best first), where a further chunk of a document already taken keeps its
    place only when its weight is at least `ratio` times that of the best chunk of a document not yet
    taken; otherwise that chunk comes first. `weights`: the hits' fused scores unless given. A large
    ratio takes one chunk per document before any second one; 1 keeps the rank order.

    Each hit returned is a copy whose `score` is the weight it was placed by: its own, or, for a further
    chunk of a document already taken, its own divided by `ratio`. Every step takes the largest such
    weight left, and weights only fall as documents are taken, so the scores shown descend.

    Why a ratio: page questions want more pages in the prompt (one page's five chunks leave no room
    for the right page), detail questions want the one right page's next passage, and that passage
    is then ranked far above other pages' best. On four dev sets R = 2 gained hit@5 or held it within 0.002 on every one."""
    weights = weights if weights is not None else [h["score"] for h in hits]
    rest = list(zip(weights, range(len(hits))))
    out: list[dict] = []
    seen: set[str] = set()
    while rest and len(out) < k:
        pos = 0
        w, i = rest[0]
        if hits[i]["source_path"] in seen:
            new = next((j for j, (_, m) in enumerate(rest) if hits[m]["source_path"] not in seen), None)
            if new is not None and w < ratio * rest[new][0]:
                pos = new
        w, i = rest.pop(pos)
        repeat = hits[i]["source_path"] in seen
        out.append(dict(hits[i], score=w / ratio if repeat else w))
        seen.add(hits[i]["source_path"])
    return out


class Searcher:
    """Search one collection as `corpusmill search` does. The defaults are the config's (hybrid, page
    spreading at 2, ef_search 100): jobs.api.Collection passes them; `mode="vector"` with no ratio is the
    plain nearest-neighbour ranking."""

    def __init__(self, store: PgStore, collection: str, ef_search: int = 100, mode: str = "hybrid",
                 repeat_ratio: float | None = 2.0, model=None):
        coll = store.get_collection(collection)
        if coll is None:
            known = ", ".join(c.name for c in store.list_collections()) or "none yet"
            raise UnknownCollection(f"no collection named {collection!r} (known: {known})")
        from jobs.embed.backends import load_model  # late: a wrong name is told before torch loads

        if mode != "vector":  # a collection from before full-text search gets its column and index once
            try:
                store.ensure_text_index(coll)
            except psycopg.errors.InsufficientPrivilege as exc:
                log.warning("%s: searching by vector only (%s)", collection, exc)
                mode = "vector"
        self.store, self.coll, self.ef_search, self.mode = store, coll, ef_search, mode
        self.repeat_ratio = repeat_ratio if repeat_ratio and repeat_ratio > 1 else None
        # The query must be embedded by the model that embedded the chunks, whatever the config says now.
        # `model`: one already loaded for this collection (a service searching in several modes loads it once).
        self.model = model or load_model(coll.embedding_model)  # its backend too (jobs/embed/backends.py)
        if mode == "hybrid-doc":  # the documents' outline vectors, with the same model (built once, then kept current)
            built = store.ensure_doc_vectors(coll, self._encode)
            if built:
                log.info("%s: %d document vectors embedded", collection, built)

    def search(self, query: str, k: int = 5, filters: list[Filter] | None = None,
               min_similarity: float | None = None) -> list[dict]:
        return self.search_many([query], k, filters=filters, min_similarity=min_similarity)[0]

    def _encode(self, texts: list[str]):
        return self.model.encode(texts, normalize_embeddings=True, show_progress_bar=False, batch_size=64)

    def search_many(self, queries: list[str], k: int = 5, exact: bool = False, filters: list[Filter] | None = None,
                    min_similarity: float | None = None,
                    passages: bool = True) -> list[list[dict]]:
        """Each query's hits, best first, each with `rank`, `score` (what orders the list: the fused score,
        or the cosine in plain vector mode), `cosine` and `bm25` (None where BM25 did not rank it), its
        locators, metadata and matching passage (jobs/store/hits.py). `filters`: jobs/store/filters.py.
        `min_similarity`: hits less similar to the query (cosine) are dropped, so a query about nothing in
        the collection can come back empty."""
        vectors = self._encode(queries)
        if self.repeat_ratio is None:
            ranked = self.store.search_many(self.coll, vectors, k, self.ef_search, exact, queries=queries,
                                            mode=self.mode, filters=filters)
        else:
            # Candidates ranked before `diversify` picks k, as deep as the fused rankings: enough that k
            # distinct documents are almost always among them.
            depth = max(k, DEPTH)
            ranked = self.store.search_many(self.coll, vectors, depth, self.ef_search, exact, queries=queries,
                                            mode=self.mode, filters=filters)
            # Fused modes score by reciprocal rank; a cosine is no such score, so vector hits weigh as their rank would.
            by_rank = [1.0 / (RRF_K + r) for r in range(1, depth + 1)] if self.mode == "vector" else None
            ranked = [diversify(hs, self.repeat_ratio, k, by_rank[:len(hs)] if by_rank else None) for hs in ranked]
        out = []
        for query, hits in zip(queries, ranked):
            if min_similarity is not None:
                hits = [h for h in hits if h["cosine"] is not None and h["cosine"] >= min_similarity]
            if passages:  # a ts_headline per hit: for hits a person reads, not for an evaluation's rankings
                hits = self.store.add_passages(self.coll, hits, query)
            out.append([dict(h, rank=rank, score=round(h["score"], 6)) for rank, h in enumerate(hits, 1)])
        return out
