"""What the indexes cost in retrieval (#34), on every dev set: BM25 exact or through its indexes, vectors
through an HNSW index over float32, halfvec or binary quantization, side by side on the same chunks.

    BENCH_HOME=DIR python -m ops.bench.index_quality     # EVAL_SETS as for make eval

Uses the default pipeline's collections a `make eval` keeps in BENCH_HOME (`eval_<set>_default`) and
ingests those that are missing. On each chunk table it builds the halfvec and binary HNSW indexes beside
the float32 one (each query's ORDER BY picks its own index), then per question takes the BM25 ranking
(exact, as `--exact` and every search before the lexical index; and indexed, as `search` now does) and
the vector rankings, and fuses them as `hybrid` does (jobs/search/ranking.py, then jobs/search/searcher.py
`diversify`), scored by `corpusmill eval`'s own evaluate(). Prints page (and passage) hit@1/@5/@10 per set
and combination, and per set each vector index's size and build seconds, and the table's vectors stored
as vector or halfvec; writes BENCH_OUT/index_quality.json. Not in `make bench`.
"""

from __future__ import annotations

import sys
import time

from jobs.search.ranking import DEPTH, FUSED_EF_SEARCH
from ops.bench import common, retrieval

REPEAT_RATIO = 2.0  # configs/local.yaml's database.repeat_ratio
KINDS = ("vector", "halfvec", "binary")
COMBOS = {  # name: (BM25 ranking, vector index)
    "exact BM25 + float32 HNSW (before)": ("exact", "vector"),
    "indexed BM25 + float32 HNSW": ("indexed", "vector"),
    "indexed BM25 + halfvec HNSW": ("indexed", "halfvec"),
    "indexed BM25 + binary HNSW, re-ranked": ("indexed", "binary"),
    "float32 HNSW alone": (None, "vector"),
    "halfvec HNSW alone": (None, "halfvec"),
    "binary HNSW alone, re-ranked": (None, "binary"),
}


def build_indexes(store, coll) -> dict:
    """An HNSW index of each kind beside the collection's own (`database.vector_index`, made if missing):
    size and build seconds of each (None for the collection's own, built by the ingest)."""
    from psycopg import sql

    from jobs.store import index_kinds
    from jobs.store.names import bounded_name, index_name

    out = {}
    table = sql.Identifier(store.schema, coll.chunk_table)
    store.ensure_hnsw_index(coll)
    own = index_name(coll.chunk_table, "hnsw")
    own_kind = index_kinds.kind_of(store.conn, store.schema, own)
    for kind in KINDS:
        name = own if kind == own_kind else bounded_name(coll.chunk_table, f"_{kind}")
        t = time.perf_counter()
        if kind != own_kind:
            store.conn.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} USING hnsw ({})").format(
                sql.Identifier(name), table, index_kinds.key(kind, coll.dimension)))
        out[kind] = {"seconds": round(time.perf_counter() - t, 1) if kind != own_kind else None,
                     "mib": round(store.conn.execute("SELECT pg_relation_size(%s::regclass)",
                                                     (f"{store.schema}.{name}",)).fetchone()[0] / 2 ** 20, 2)}
    for storage in ("vector", "halfvec"):  # the vectors alone, as a column of either type
        scratch = sql.Identifier(store.schema, f"iq_{storage}")
        store.conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(scratch))
        store.conn.execute(sql.SQL("CREATE TABLE {} AS SELECT chunk_id, embedding::{}({}) AS embedding FROM {}").format(
            scratch, sql.SQL(storage), sql.Literal(coll.dimension), table))
        out[f"stored_{storage}_mib"] = round(store.conn.execute("SELECT pg_table_size(%s::regclass)", (
            f"{store.schema}.iq_{storage}",)).fetchone()[0] / 2 ** 20, 2)
        store.conn.execute(sql.SQL("DROP TABLE {}").format(scratch))
    return out


def rankings(store, coll, questions, model) -> tuple[list[dict], dict]:
    """Per question {"exact"/"indexed": BM25 (chunk, score) lists, kind: vector lists}; chunk -> hit fields."""
    from psycopg import sql

    from jobs.search import bm25, hits, ranking

    vectors = model.encode([q.question for q in questions], normalize_embeddings=True, show_progress_bar=False,
                           batch_size=64)
    table = sql.Identifier(store.schema, coll.chunk_table)
    out = []
    with store.conn.transaction():
        store.conn.execute(sql.SQL("SET LOCAL hnsw.ef_search = {}").format(sql.Literal(FUSED_EF_SEARCH)))
        stats = bm25.corpus_stats(store.conn, store.schema, coll.chunk_table)
        for q, v in zip(questions, vectors):
            r = {"exact": bm25.bm25_scores(store.conn, table, q.question, DEPTH, stats),
                 "indexed": bm25.scores(store.conn, store.schema, coll.chunk_table, q.question, DEPTH)}
            for kind in KINDS:
                r[kind] = ranking.vector_scores(store.conn, table, v, DEPTH, (kind, coll.dimension))
            out.append(r)
    ids = sorted({c for r in out for ranked in r.values() for c, _ in ranked})
    return out, hits.hit_fields(store.conn, table, ids)


def score(questions, ranked, meta, bm25: str | None, kind: str) -> dict:
    from jobs.search import diversify
    from jobs.search.ranking import fuse

    hits = []
    for r in ranked:
        scored = [r[bm25], r[kind]] if bm25 else [r[kind]]
        fused = fuse([[c for c, _ in s] for s in scored], DEPTH, scored) if bm25 else r[kind]
        hits.append(diversify([dict(meta[c], score=s) for c, s in fused], REPEAT_RATIO, 10))
    return retrieval.offline_levels(questions, hits)


def bench() -> dict:
    from jobs.embed.backends import load_model
    from jobs.store.pgvector import PgStore
    from jobs.tools.evaluate import load_golden

    out, model = {"sets": {}}, None
    with PgStore(common.database_url(), "corpusmill") as store:
        store.migrate()  # a fresh home: the tables stored_rows reads
    for name in retrieval.chosen_sets():
        data = retrieval.prepare(name, common.work_dir())
        collection = f"eval_{name}_default"
        if retrieval.stored_rows(collection=collection) is None:
            print(f"[{name}] ingest default", file=sys.stderr, flush=True)
            common.ingest(data["corpus"], collection, config=retrieval.CONFIGS["default"], tag=f"eval-{name}-default")
        questions = load_golden(data["golden"])
        with PgStore(common.database_url(), "corpusmill") as store:
            store.migrate()
            coll = store.get_collection(collection)
            store.ensure_text_index(coll)
            model = model or load_model(coll.embedding_model)
            print(f"[{name}] indexes and rankings", file=sys.stderr, flush=True)
            indexes = build_indexes(store, coll)
            ranked, meta = rankings(store, coll, questions, model)
        out["sets"][name] = {"questions": len(questions), "indexes": indexes,
                             "combos": {c: score(questions, ranked, meta, *how) for c, how in COMBOS.items()}}
    return out


def report(r: dict) -> str:
    def cell(levels: dict, level: str) -> str:
        return "/".join(f"{x:.3f}" for x in levels[level]) if level in levels else ""

    rows = [[name, combo, cell(levels, "document"), cell(levels, "passage")]
            for name, s in r["sets"].items() for combo, levels in s["combos"].items()]
    out = common.table(["set", "ranking", "page @1/@5/@10", "passage @1/@5/@10"], rows,
                       "Retrieval by index kind (default pipeline's chunks, hybrid fusion as `search`)")
    def built(seconds: float | None) -> str:
        return "the collection's" if seconds is None else f"{seconds}"

    return out + common.table(["set", "HNSW float32 MiB", "HNSW halfvec MiB", "HNSW binary MiB", "float32 build s",
                               "halfvec build s", "binary build s", "vectors as vector MiB", "vectors as halfvec MiB"],
                              [[name] + [s["indexes"][k]["mib"] for k in KINDS]
                               + [built(s["indexes"][k]["seconds"]) for k in KINDS]
                               + [s["indexes"]["stored_vector_mib"], s["indexes"]["stored_halfvec_mib"]]
                               for name, s in r["sets"].items()], "Vector index sizes")


def main(argv: list[str] | None = None) -> int:
    return common.run_one("index_quality", bench, report)


if __name__ == "__main__":
    sys.exit(main())
