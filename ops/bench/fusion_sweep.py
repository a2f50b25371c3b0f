"""Fusion weights offline (#17): the document-outline ranking fused at a fraction of the other two,
and the fusion constant and repeat ratio swept, on the collections a `make eval` left behind.

    BENCH_HOME=/tmp/evalhome make eval                       # ingests every dev set, both pipelines, and keeps them
    BENCH_HOME=/tmp/evalhome python -m ops.bench.fusion_sweep

Per question it takes the three rankings `hybrid-doc` fuses (BM25, vector through HNSW with the
configs' ef_search, documents by outline vector; 50 deep each, as jobs/store/text_search.py), once,
then fuses them offline with each setting, picks k with jobs/search.py `diversify` and scores them as
`corpusmill eval` does. Prints page (and passage) hit@1/@5/@10 per set, pipeline and setting, and
for each (k, ratio, weight) how many of the eight page @1/@5 cells the default leads the naive
baseline on. Writes BENCH_OUT/fusion_sweep.json.
"""

from __future__ import annotations

import itertools
import sys

from jobs.store.text_search import DEPTH  # each ranking as deep as `search` takes it
from ops.bench import common, retrieval

WEIGHTS = (0, 0.25, 0.5, 1.0)  # the document ranking's weight; BM25 and vector weigh 1
GRID = {"rrf_k": (1, 2, 5), "ratio": (1.5, 2.0, 3.0, 1e9), "weight": (0, 0.15)}


def rankings(store, coll, questions, model) -> tuple[list, dict]:
    """(per question: bm25, vector and document rankings of chunk ids; chunk id -> hit fields)."""
    from psycopg import sql

    from jobs.store import doc_vectors, text_search

    def encode(texts):
        return model.encode(texts, normalize_embeddings=True, show_progress_bar=False, batch_size=64)

    store.ensure_text_index(coll)
    store.ensure_doc_vectors(coll, encode)
    vectors = encode([q.question for q in questions])
    table = sql.Identifier(store.schema, coll.chunk_table)
    docs = sql.Identifier(store.schema, doc_vectors.table_name(coll.chunk_table))
    out = []
    with store.conn.transaction():
        store.conn.execute("SET LOCAL hnsw.ef_search = 100")
        stats = text_search.corpus_stats(store.conn, table)
        for q, v in zip(questions, vectors):
            out.append(([c for c, _ in text_search.bm25_scores(store.conn, table, q.question, DEPTH, stats)],
                        [c for c, _ in text_search.vector_scores(store.conn, table, v, DEPTH)],
                        doc_vectors.doc_ranking(store.conn, docs, table, v, DEPTH)))
    return out, text_search.hit_fields(store.conn, table, sorted({c for r in out for ranking in r for c in ranking}))


def score(questions, ranked, meta, weight: float, rrf_k: int, ratio: float) -> dict:
    """{level: [hit@1, hit@5, hit@10]} with the document ranking at `weight`."""
    from jobs.search import diversify

    hits = []
    for rs in ranked:
        fused: dict[str, float] = {}
        for ranking, w in zip(rs, (1.0, 1.0, weight)):
            for rank, chunk in enumerate(ranking, 1):
                fused[chunk] = fused.get(chunk, 0.0) + w / (rrf_k + rank)
        top = sorted(fused.items(), key=lambda x: (-x[1], x[0]))[:DEPTH]
        hits.append(diversify([dict(meta[c], score=s) for c, s in top], ratio, 10))
    return retrieval.offline_levels(questions, hits)


def bench() -> dict:
    from sentence_transformers import SentenceTransformer

    from jobs.embed.models import resolve_model
    from jobs.store.pgvector import PgStore
    from jobs.tools.evaluate import load_golden

    data, model = {}, None
    with PgStore(common.database_url(), "corpusmill") as store:
        store.migrate()
        for name in retrieval.chosen_sets():
            golden = retrieval.prepare(name, common.work_dir())["golden"]
            questions = load_golden(golden)
            for pipeline in ("default", "naive"):
                coll = store.get_collection(f"eval_{name}_{pipeline}")
                if coll is None:
                    raise SystemExit(f"no collection eval_{name}_{pipeline}: run `BENCH_HOME=… make eval` first")
                model = model or SentenceTransformer(resolve_model(coll.embedding_model).location, device="cpu")
                print(f"[{name}] rankings of {pipeline}", file=sys.stderr, flush=True)
                data[(name, pipeline)] = (questions, *rankings(store, coll, questions, model))
    weights = {f"{name} {pipeline} w={w:g}": score(*data[(name, pipeline)], w, 2, 2.0)
               for (name, pipeline) in data for w in WEIGHTS}
    grid = []
    for rrf_k, ratio, w in itertools.product(GRID["rrf_k"], GRID["ratio"], GRID["weight"]):
        page = {key: score(*data[key], w, rrf_k, ratio)["document"] for key in data}
        sets = sorted({n for n, _ in data})
        leads = sum(page[(n, "default")][i] > page[(n, "naive")][i] for n in sets for i in (0, 1))
        grid.append({"rrf_k": rrf_k, "ratio": ratio, "weight": w, "default_leads": f"{leads}/{2 * len(sets)}",
                     "page": {f"{n} {p}": v for (n, p), v in page.items()}})
    return {"weights": weights, "grid": grid}


def report(r: dict) -> str:
    rows = [[key, *(f"{'/'.join(f'{x:.3f}' for x in v)}" for v in levels.values())] for key, levels in r["weights"].items()]
    out = common.table(["set pipeline weight", "page (or first level) @1/@5/@10", "passage @1/@5/@10"], rows,
                       "Document ranking at a weight (RRF constant 2, repeat ratio 2)")
    grid = [[g["rrf_k"], g["ratio"], g["weight"], g["default_leads"]] for g in r["grid"]]
    return out + "\n" + common.table(["RRF constant", "repeat ratio", "doc weight", "default leads naive (page @1/@5)"],
                                     grid, "Sweep")


def main(argv: list[str] | None = None) -> int:
    return common.run_one("fusion_sweep", bench, report)


if __name__ == "__main__":
    sys.exit(main())
