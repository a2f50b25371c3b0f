"""Equal fused ranks settled four ways (#17), on the collections a `make eval` left behind.

    BENCH_HOME=/tmp/evalhome make eval                      # ingests every dev set and keeps them
    BENCH_HOME=/tmp/evalhome python -m ops.bench.fusion_ties  # EVAL_SETS as for make eval

With two rankings fused by reciprocal rank, a chunk first by one and third by the other ties exactly
with one third and first. Per question this takes the two rankings `hybrid` search fuses, with their
scores (BM25, and cosine by exact scan; 50 deep: jobs/store/text_search.py), once, then settles equal
fused sums by: the smaller chunk id (the order before), the better vector rank, the better BM25 rank,
or what `search` does now (`text_search.fuse` with the scores: chunks of equal BM25 score share a rank,
and equal sums go to the rankings' min-max normalized scores summed; the first three rank equal BM25
scores one after another by chunk id). The hits are then picked as `search` picks them
(jobs/search.py `diversify`, repeat ratio 2) and scored as `corpusmill eval` scores them. Prints page
(and passage) hit@1/@5/@10 per set, pipeline and rule, and how many questions have equal BM25 scores
among their first ten hits; writes BENCH_OUT/fusion_ties.json. The tie table in ops/bench/RESULTS.md is this bench's
output. Not in `make bench`.
"""

from __future__ import annotations

import sys

from jobs.store.text_search import DEPTH  # each ranking as deep as `search` takes it
from ops.bench import common, retrieval

RULES = ("chunk id", "vector rank", "BM25 rank", "normalized scores")
REPEAT_RATIO = 2.0  # configs/local.yaml's database.repeat_ratio


def scored_rankings(store, coll, questions, model) -> tuple[list, dict]:
    """(per question: the BM25 and vector rankings as (chunk id, score), best first; chunk id -> hit fields)."""
    from psycopg import sql

    from jobs.store import text_search

    vectors = model.encode([q.question for q in questions], normalize_embeddings=True, show_progress_bar=False,
                           batch_size=64)
    table = sql.Identifier(store.schema, coll.chunk_table)
    store.ensure_text_index(coll)
    out = []
    with store.conn.transaction():
        store.conn.execute("SET LOCAL enable_indexscan = off")  # exact, as `make eval` ranks vectors
        stats = text_search.corpus_stats(store.conn, table)
        for q, v in zip(questions, vectors):
            out.append((text_search.bm25_scores(store.conn, table, q.question, DEPTH, stats),
                        text_search.vector_scores(store.conn, table, v, DEPTH)))
    return out, text_search.hit_fields(store.conn, table, sorted({c for pair in out for r in pair for c, _ in r}))


def settle(bm25: list[tuple[str, float]], vector: list[tuple[str, float]], rule: str) -> list[tuple[str, float]]:
    """The fused ranking with equal sums settled by `rule`."""
    from jobs.store.text_search import fuse

    rankings = [[c for c, _ in bm25], [c for c, _ in vector]]
    if rule == "normalized scores":
        return fuse(rankings, DEPTH, [bm25, vector])
    fused = fuse(rankings, DEPTH)  # ties by chunk id
    if rule == "chunk id":
        return fused
    by = {c: rank for rank, c in enumerate(rankings[1] if rule == "vector rank" else rankings[0])}
    return sorted(fused, key=lambda item: (-round(item[1], 12), by.get(item[0], DEPTH), item[0]))


def bm25_ties(ranked, first: int = 10) -> int:
    """Questions whose first `first` BM25 hits hold two of one score (rounded as `fuse` rounds them)."""
    return sum(len({round(s, 9) for _, s in bm25[:first]}) < len(bm25[:first]) for bm25, _ in ranked)


def score(questions, ranked, meta, rule: str) -> dict:
    """{level: [hit@1, hit@5, hit@10]} of the hits `rule` gives."""
    from jobs.search import diversify

    return retrieval.offline_levels(questions, [
        diversify([dict(meta[c], score=s) for c, s in settle(bm25, vector, rule)], REPEAT_RATIO, 10)
        for bm25, vector in ranked])


def bench() -> dict:
    from jobs.embed.backends import load_model
    from jobs.store.pgvector import PgStore
    from jobs.tools.evaluate import load_golden

    out, ties, model = {}, {}, None
    with PgStore(common.database_url(), "corpusmill") as store:
        store.migrate()
        for name in retrieval.chosen_sets():
            questions = load_golden(retrieval.prepare(name, common.work_dir())["golden"])
            for pipeline in ("default", "naive"):
                coll = store.get_collection(f"eval_{name}_{pipeline}")
                if coll is None:
                    raise SystemExit(f"no collection eval_{name}_{pipeline}: run `BENCH_HOME=… make eval` first")
                model = model or load_model(coll.embedding_model)
                print(f"[{name}] rankings of {pipeline}", file=sys.stderr, flush=True)
                ranked, meta = scored_rankings(store, coll, questions, model)
                out[f"{name} {pipeline}"] = {rule: score(questions, ranked, meta, rule) for rule in RULES}
                ties[f"{name} {pipeline}"] = [bm25_ties(ranked), len(questions)]
    return {"rules": out, "bm25_ties_in_first_ten": ties}


def report(r: dict) -> str:
    def cell(levels: dict, level: str) -> str:
        return "/".join(f"{x:.3f}" for x in levels[level]) if level in levels else ""

    rows = [[key, rule, cell(levels, "document"), cell(levels, "passage")]
            for key, rules in r["rules"].items() for rule, levels in rules.items()]
    ties = "\n".join(f"{key}: {n} of {of} questions have equal BM25 scores among their first ten hits"
                      for key, (n, of) in r["bm25_ties_in_first_ten"].items())
    return common.table(["set pipeline", "ties settled by", "page (or first level) @1/@5/@10", "passage @1/@5/@10"],
                        rows, "Equal fused ranks settled four ways (hybrid search, vectors by exact scan)") + "\n" + ties


def main(argv: list[str] | None = None) -> int:
    return common.run_one("fusion_ties", bench, report)


if __name__ == "__main__":
    sys.exit(main())
