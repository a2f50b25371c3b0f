"""Query a collection: embed the query with the collection's own model, then rank by vector (pgvector's
HNSW index), by text (BM25 over the chunks' terms), both fused (jobs/search/ranking.py), or both
and the documents' outline vectors fused (`hybrid-doc`, jobs/store/doc_vectors.py); then more pages
among the first hits, unless one page clearly leads (`repeat_ratio`)."""

from __future__ import annotations

import logging
import threading

from jobs.errors import NotFoundError
from jobs.search import ranking
from jobs.search.filters import Filter
from jobs.search.hits import add_passages
from jobs.search.ranking import DEPTH, RRF_K
from jobs.store import doc_vectors
from jobs.store.pgvector import PgStore, UnknownCollection
from jobs.store.spaces import Collection

log = logging.getLogger(__name__)


class NotBuiltError(NotFoundError):
    """A search mode needs derived data the write side has not built (hybrid-doc's document vectors)."""


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
                 repeat_ratio: float | None = 2.0, model=None, encode_lock: threading.Lock | None = None,
                 coll: Collection | None = None):
        # `coll`: the collection's row as the caller just read it (so `model` is surely that space's model)
        coll = coll or store.get_collection(collection)
        if coll is None:
            known = ", ".join(c.name for c in store.list_collections()) or "none yet"
            raise UnknownCollection(f"no collection named {collection!r} (known: {known})")
        from jobs.embed.backends import load_model  # late: a wrong name is told before torch loads

        if mode != "vector" and not store.lexical_ready(coll):
            # A table from before the terms were analysed on the workers: its next ingest or load upgrades it
            # (a search changes nothing).
            raise NotBuiltError(f"mode {mode} needs the analysed terms of collection {collection!r}, which it was "
                                f"written without: run `corpusmill upgrade --collection {collection}` (as a role that "
                                "may write; its next ingest or load does it too), or search with --mode vector")
        if mode == "hybrid-doc" and not doc_vectors.exists(store.conn, store.schema, coll.chunk_table):
            # Built by the write side only: a search never embeds a whole collection or creates a table.
            raise NotBuiltError(f"mode hybrid-doc needs the document vectors of collection {collection!r}, which "
                                f"are not built: run `corpusmill upgrade --doc-vectors --collection {collection}` "
                                "(as a role that may write), or search in another mode")
        self.store, self.coll, self.ef_search, self.mode = store, coll, ef_search, mode
        self.repeat_ratio = repeat_ratio if repeat_ratio and repeat_ratio > 1 else None
        # The query must be embedded by the model that embedded the chunks, whatever the config says now.
        # `model`: one already loaded for this collection (a service searching in several modes loads it once).
        self.model = model or load_model(coll.embedding_model)  # its backend too (jobs/embed/backends.py)
        # A fast tokenizer is not safe to call from two threads at once: a service's searchers share the
        # model and this lock; the database work of their searches still runs side by side.
        self.encode_lock = encode_lock or threading.Lock()

    def search(self, query: str, k: int = 5, filters: list[Filter] | None = None,
               min_similarity: float | None = None) -> list[dict]:
        return self.search_many([query], k, filters=filters, min_similarity=min_similarity)[0]

    def _encode(self, texts: list[str]):
        with self.encode_lock:
            return self.model.encode(texts, normalize_embeddings=True, show_progress_bar=False, batch_size=64)

    def search_many(self, queries: list[str], k: int = 5, exact: bool = False, filters: list[Filter] | None = None,
                    min_similarity: float | None = None, passages: bool = True,
                    store: PgStore | None = None) -> list[list[dict]]:
        """Each query's hits, best first, each with `rank`, `score` (what orders the list: the fused score; in
        vector mode the reciprocal rank the fused modes use, or the cosine where repeat_ratio is off),
        `cosine` and `bm25` (None where BM25 did not rank it), its locators, metadata and matching passage
        (jobs/search/hits.py). `filters`: jobs/search/filters.py. `min_similarity`: hits less similar to
        the query (cosine) are dropped, so a query about nothing in the collection can come back empty.
        `store`: the connection to search over (a service lends each request one of its pool's), else the
        one this searcher was made with."""
        store = store or self.store
        vectors = self._encode(queries)
        if self.repeat_ratio is None:
            ranked = ranking.search_many(store, self.coll, vectors, k, self.ef_search, exact, queries=queries,
                                         mode=self.mode, filters=filters)
        else:
            # Candidates ranked before `diversify` picks k, as deep as the fused rankings: enough that k
            # distinct documents are almost always among them.
            depth = max(k, DEPTH)
            ranked = ranking.search_many(store, self.coll, vectors, depth, self.ef_search, exact, queries=queries,
                                         mode=self.mode, filters=filters)
            # Fused modes score by reciprocal rank; a cosine is no such score, so vector hits weigh as their rank would.
            by_rank = [1.0 / (RRF_K + r) for r in range(1, depth + 1)] if self.mode == "vector" else None
            ranked = [diversify(hs, self.repeat_ratio, k, by_rank[:len(hs)] if by_rank else None) for hs in ranked]
        out = []
        for query, hits in zip(queries, ranked):
            if min_similarity is not None:
                hits = [h for h in hits if h["cosine"] is not None and h["cosine"] >= min_similarity]
            if passages:  # a ts_headline per hit: for hits a person reads, not for an evaluation's rankings
                hits = add_passages(store, self.coll, hits, query)
            out.append([dict(h, rank=rank, score=round(h["score"], 6)) for rank, h in enumerate(hits, 1)])
        return out
