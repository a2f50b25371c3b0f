"""Query a collection: embed the query with the collection's own model, then rank by vector (pgvector's
HNSW index), by text (BM25 over the full-text column), both fused (jobs/store/text_search.py), or both
and the documents' outline vectors fused (`hybrid-doc`, jobs/store/doc_vectors.py); optionally at most
N chunks of one document among the hits (`per_document`)."""

from __future__ import annotations

import logging

import psycopg

from jobs.embed.models import resolve_model
from jobs.store.pgvector import PgStore, UnknownCollection

log = logging.getLogger(__name__)

# Candidates ranked before the per-document cap picks k: enough that k distinct documents are
# almost always among them (the fused rankings are this deep too: text_search.DEPTH).
CAP_DEPTH = 50


def per_document(hits: list[dict], cap: int, k: int) -> list[dict]:
    """The first k hits taking at most `cap` chunks of one document; when fewer documents than that
    are among the candidates, the chunks passed over follow in their rank order."""
    taken: dict[str, int] = {}
    first, rest = [], []
    for h in hits:
        n = taken.get(h["source_path"], 0)
        (first if n < cap else rest).append(h)
        taken[h["source_path"]] = n + 1
    return (first + rest)[:k]


class Searcher:
    def __init__(self, store: PgStore, collection: str, ef_search: int = 40, mode: str = "vector",
                 per_document: int | None = None):
        coll = store.get_collection(collection)
        if coll is None:
            known = ", ".join(c.name for c in store.list_collections()) or "none yet"
            raise UnknownCollection(f"no collection named {collection!r} (known: {known})")
        from sentence_transformers import SentenceTransformer  # late: a wrong name is told before torch loads

        if mode != "vector":  # a collection from before full-text search gets its column and index once
            try:
                store.ensure_text_index(coll)
            except psycopg.errors.InsufficientPrivilege as exc:
                log.warning("%s: searching by vector only (%s)", collection, exc)
                mode = "vector"
        self.store, self.coll, self.ef_search, self.mode = store, coll, ef_search, mode
        self.per_document = per_document
        # The query must be embedded by the model that embedded the chunks, whatever the config says now.
        self.model = SentenceTransformer(resolve_model(coll.embedding_model).location, device="cpu")
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
        depth = max(k, CAP_DEPTH) if self.per_document else k
        hits = self.store.search_many(self.coll, vectors, depth, self.ef_search, exact, queries=queries, mode=self.mode)
        return [per_document(h, self.per_document, k) for h in hits] if self.per_document else hits
