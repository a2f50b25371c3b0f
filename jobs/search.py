"""Query a collection: embed the query with the collection's own model, ask pgvector's HNSW index."""

from __future__ import annotations

from sentence_transformers import SentenceTransformer

from jobs.embed.models import resolve_model
from jobs.store.pgvector import PgStore, UnknownCollection


class Searcher:
    def __init__(self, store: PgStore, collection: str, ef_search: int = 40):
        coll = store.get_collection(collection)
        if coll is None:
            known = ", ".join(c.name for c in store.list_collections()) or "none yet"
            raise UnknownCollection(f"no collection named {collection!r} (known: {known})")
        self.store, self.coll, self.ef_search = store, coll, ef_search
        # The query must be embedded by the model that embedded the chunks, whatever the config says now.
        self.model = SentenceTransformer(resolve_model(coll.embedding_model).location, device="cpu")

    def search(self, query: str, k: int = 5) -> list[dict]:
        return self.search_many([query], k)[0]

    def search_many(self, queries: list[str], k: int = 5, exact: bool = False) -> list[list[dict]]:
        vectors = self.model.encode(queries, normalize_embeddings=True, show_progress_bar=False, batch_size=64)
        return self.store.search_many(self.coll, vectors, k, self.ef_search, exact)
