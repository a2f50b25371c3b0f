"""The search that reads: the service that answers queries over what the ingest wrote (jobs/store/, the
sink). searcher (a query embedded by the collection's own model, ranked, spread over pages), ranking
(each mode's ranking over a chunk table, and their fusion), bm25 (a query's BM25, through the indexes or
exact), vector_index (the nearest-neighbour query through the HNSW index), hits (what a hit carries:
locators, metadata, the passage that matched), filters (metadata and path filters as SQL), limits (the
bounds of one request), read_pool (read-only connections for searches that run at once).

The store never imports this package: its query functions take the store.
"""

from jobs.search.searcher import NotBuiltError, Searcher, diversify

__all__ = ["NotBuiltError", "Searcher", "diversify"]
