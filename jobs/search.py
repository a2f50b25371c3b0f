"""Query a collection: embed the query with the collection's own model, then rank by vector (pgvector's
HNSW index), by text (BM25 over the full-text column), both fused (jobs/store/text_search.py), or both
and the documents' outline vectors fused (`hybrid-doc`, jobs/store/doc_vectors.py); then more pages
among the first hits, unless one page clearly leads (`repeat_ratio`)."""

from __future__ import annotations

import logging

import psycopg

from jobs.store.pgvector import PgStore, UnknownCollection
from jobs.store.text_search import DEPTH, RRF_K

log = logging.getLogger(__name__)


def diversify(hits: list[dict], ratio: float, k: int, weights: list[float] | None = None) -> list[dict]:
    """The first k of `hits` (best first), where a further chunk of a document already taken keeps its
    place only when its weight is at least `ratio` times that of the best chunk of a document not yet
    taken; otherwise that chunk comes first. `weights`: the hits' fused scores unless given. A large
    ratio takes one chunk per document before any second one; 1 keeps the rank order.

    Why a ratio: page questions want more pages in the prompt (one page's five chunks leave no room
    for the right page), detail questions want the one right page's next passage, and that passage
    is then ranked far above other pages' best. Measured on four dev sets (ops/bench/RESULTS.md, Retrieval history)."""
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
        _, i = rest.pop(pos)
        out.append(hits[i])
        seen.add(hits[i]["source_path"])
    return out


class Searcher:
    def __init__(self, store: PgStore, collection: str, ef_search: int = 40, mode: str = "vector",
                 repeat_ratio: float | None = None):
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
        self.model = load_model(coll.embedding_model)  # its backend too (jobs/embed/backends.py)
        if mode == "hybrid-doc":  # the documents' outline vectors, with the same model (built once, then kept current)
            built = store.ensure_doc_vectors(coll, self._encode)
            if built:
                log.info("%s: %d document vectors embedded", collection, built)

    def search(self, query: str, k: int = 5) -> list[dict]:
        return self.search_many([query], k)[0]

    def _encode(self, texts: list[str]):
        return self.model.encode(texts, normalize_embeddings=True, show_progress_bar=False, batch_size=64)

    def search_many(self, queries: list[str], k: int = 5, exact: bool = False) -> list[list[dict]]:
        vectors = self._encode(queries)
        if self.repeat_ratio is None:
            return self.store.search_many(self.coll, vectors, k, self.ef_search, exact, queries=queries, mode=self.mode)
        # Candidates ranked before `diversify` picks k, as deep as the fused rankings: enough that k distinct
        # documents are almost always among them.
        depth = max(k, DEPTH)
        ranked = self.store.search_many(self.coll, vectors, depth, self.ef_search, exact, queries=queries, mode=self.mode)
        # Fused modes score by reciprocal rank; a cosine is no such score, so vector hits weigh as their rank would.
        by_rank = [1.0 / (RRF_K + r) for r in range(1, depth + 1)] if self.mode == "vector" else None
        return [diversify(hs, self.repeat_ratio, k, by_rank[:len(hs)] if by_rank else None) for hs in ranked]
