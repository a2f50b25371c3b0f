"""The index at size (#34): real chunks copied and perturbed to 10k, 100k and 1M, loaded through the job's
own write path, then searched in every mode.

    python -m ops.bench.scale          # make bench-scale; BENCH_SCALE_SIZES=10000,100000 for a shorter run

The seed is a default ingest of the openshift-docs pages (`BENCH_SCALE_SEED=RUN_DIR` takes an earlier
run's Parquet instead). Each size is made of copies of its chunks, each copy perturbed as another corpus
of the same kind would differ: its own paths (`copyN/…`), a tag word in its text, its vectors moved by
small Gaussian noise (σ = BENCH_SCALE_NOISE per dimension, 0.01: a cosine of ~0.98 to the original) and
renormalised. A document is never split between parts. Per size:

- load: `corpusmill load --from-parquet` into a fresh collection (Ray, the driver's pass, the writers,
  then the index builds), the loading phase seen from the database (write_path.Sampler) against, in the
  same run: a plain pgvector COPY (one session, binary COPY of the same rows' id, breadcrumb, text and
  vector into a table of just those columns, encoded before it starts: pgvector's own rate, what the
  load is measured against),
  and a raw COPY of the same rows into a chunk table (every contract column, its indexes, the writers'
  Arrow-to-COPY conversion); the index builds' seconds as the load logs them;
- sizes: the chunk table and each of its indexes;
- search: BENCH_SCALE_QUERIES (60) openshift-docs questions, embedded once beforehand, each searched
  alone (k = 10) in `vector`, `text` and `hybrid` mode through the store, as `search` does; one warm-up
  pass, then the timed one: p50/p95 per query. Up to BENCH_SCALE_EXACT_MAX chunks (150k) also exact
  BM25 (`--exact`) and how many of the indexed ranking's first 10 exact BM25 scores as high as its own
  first 10 (bm25_agreement: by score, since copies tie); above it, that agreement over the first
  BENCH_SCALE_AGREEMENT_QUERIES (12) questions only.

The growth exponent between two sizes is log(p50 ratio) / log(size ratio): 1 is linear, 0 flat.
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from jobs.store import lexical
from jobs.store.parquet import terms_current, with_current_terms
from ops.bench import common
from ops.bench.write_path import Sampler, raw_copy

SIZES = [int(s) for s in os.environ.get("BENCH_SCALE_SIZES", "10000,100000,1000000").split(",") if s.strip()]
QUERIES = int(os.environ.get("BENCH_SCALE_QUERIES", "60"))
NOISE = float(os.environ.get("BENCH_SCALE_NOISE", "0.01"))
EXACT_MAX = int(os.environ.get("BENCH_SCALE_EXACT_MAX", "150000"))
# Above EXACT_MAX, agreement with exact BM25 on only the first this-many questions: an exact query scans
# every chunk holding a query term, seconds each at 1M.
AGREEMENT_QUERIES_LARGE = int(os.environ.get("BENCH_SCALE_AGREEMENT_QUERIES", "12"))
# Rows a Parquet part holds at least (whole documents): a long run with large flushes writes ~60,000.
PART_ROWS = int(os.environ.get("BENCH_SCALE_PART_ROWS", "5000"))
SCHEMA = "corpusmill"
MODES = ("vector", "text", "hybrid")


def openshift() -> Path:
    return common.data_dir() / "openshift-docs"


def seed_run() -> Path:
    given = os.environ.get("BENCH_SCALE_SEED")
    if given:
        return Path(given)
    return Path(common.ingest(openshift() / "corpus", "scale_seed", tag="scale-seed")["run_dir"])


def seed_rows(run: Path) -> pa.Table:
    """The seed's chunks (omitted ones too: a document's rows are whole, as the writers check), each
    document's rows together, in document order."""
    parts = [pq.read_table(p) for p in sorted((run / "chunks").glob("part-*.parquet"))]
    table = pa.concat_tables(parts, promote_options="default")
    return table.sort_by([("source_path", "ascending"), ("seq", "ascending")])


def _embedded(t: pa.Table) -> int:
    return pc.sum(pc.invert(pc.fill_null(t.column("omitted"), False))).as_py() or 0


def perturbed(seed: pa.Table, copy: int, rng: np.random.Generator) -> pa.Table:
    """One copy of the seed: its own paths, chunk ids, a tag word in its texts, its vectors moved by noise."""
    tag = f"copy{copy}"
    t = seed

    def joined(a, b):
        return pc.binary_join_element_wise(pc.cast(a, pa.string()), pc.cast(b, pa.string()), "")

    for name, new in (("source_path", joined(pa.scalar(tag + "/"), t.column("source_path"))),
                      ("chunk_id", joined(t.column("chunk_id"), pa.scalar("-" + tag))),
                      ("text", joined(t.column("text"), pa.scalar(f" ({tag})"))),
                      ("embed_text", joined(t.column("embed_text"), pa.scalar(f" ({tag})"))),
                      ("text_sha256", joined(t.column("text_sha256"), pa.scalar("-" + tag)))):
        t = t.set_column(t.schema.get_field_index(name), pa.field(name, pa.string()), new)
    arr = t.column("embedding").combine_chunks()
    present = np.asarray(arr.is_valid().to_numpy(zero_copy_only=False))  # omitted chunks have none
    vectors = np.asarray(arr.filter(pa.array(present)).flatten().to_numpy(zero_copy_only=False),
                         dtype=np.float32).reshape(int(present.sum()), -1)
    # The copy's terms, analysed again for its changed text (as the workers would have analysed it).
    t = with_current_terms(lexical.fill(t.drop_columns([c for c in lexical.LEX_COLUMNS if c in t.column_names])))
    moved = vectors + rng.normal(0.0, NOISE, vectors.shape).astype(np.float32)
    moved /= np.linalg.norm(moved, axis=1, keepdims=True)
    rows = iter(moved.tolist())
    column = pa.array([next(rows) if ok else None for ok in present], t.schema.field("embedding").type)
    return t.set_column(t.schema.get_field_index("embedding"), "embedding", column)


def make_run(seed_dir: Path, seed: pa.Table, size: int, dest: Path) -> int:
    """A run directory of about `size` rows (whole documents) of perturbed copies; returns its rows."""
    chunks = dest / "chunks"
    parts = sorted(chunks.glob("part-*.parquet"))
    if (dest / "rows").exists() and parts and terms_current(pq.read_schema(parts[0])):
        return int((dest / "rows").read_text())
    for stale in parts:  # made before the chunks carried this analyser's terms: made again
        stale.unlink()
    chunks.mkdir(parents=True, exist_ok=True)
    if (seed_dir / "run.json").exists():
        (dest / "run.json").write_bytes((seed_dir / "run.json").read_bytes())
    rng = np.random.default_rng(size)
    paths = seed.column("source_path").to_pylist()
    starts = [i for i in range(len(paths)) if i == 0 or paths[i] != paths[i - 1]] + [len(paths)]
    rows, part, pending = 0, 0, []
    copy = 0
    while rows < size:
        t = perturbed(seed, copy, rng)
        for a, b in zip(starts, starts[1:]):
            if rows >= size:
                break
            pending.append(t.slice(a, b - a))
            rows += _embedded(pending[-1])
            if sum(p.num_rows for p in pending) >= PART_ROWS:
                pq.write_table(pa.concat_tables(pending), chunks / f"part-{part:05d}.parquet")
                part, pending = part + 1, []
        copy += 1
    if pending:
        pq.write_table(pa.concat_tables(pending), chunks / f"part-{part:05d}.parquet")
    (dest / "rows").write_text(str(rows))
    return rows


_BUILT = re.compile(r"collection (\S+?)(, BM25 weights)?: HNSW index built in ([0-9.]+) s")


def _config() -> Path:
    # Every row inserted, as the raw COPY inserts them: a page's repeated boilerplate stored each time.
    return common.config_with("scale", {"database": {"shared_text": "each"}})


def load(url: str, run: Path, rows: int, collection: str) -> dict:
    """`corpusmill load` into a fresh collection, the loading phase sampled from the database."""
    from jobs.store.names import chunk_table_name

    table = chunk_table_name(collection, common.MODEL, 384)
    log = common.out_dir() / f"scale-{collection}.log"
    config = _config()
    env = dict(os.environ, PYTHONPATH=str(common.REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.perf_counter()
    with open(log, "w") as err:
        proc = subprocess.Popen([str(common.BIN / "corpusmill"), "load", "--from-parquet", str(run),
                                 "--collection", collection, "--config", str(config)],
                                cwd=common.REPO, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
        with Sampler(url, table, pid=proc.pid, period=0.5) as sampler:
            out, _ = proc.communicate()
            sampler.wait_for(rows)
    wall = time.perf_counter() - t0
    text = log.read_text()
    if proc.returncode != 0:
        raise RuntimeError(f"corpusmill load exited {proc.returncode}: {out}\n{text[-3000:]}")
    builds = {("lex" if m.group(2) else "embedding"): float(m.group(3)) for m in _BUILT.finditer(text)}
    return {"wall_s": round(wall, 1), "peak_rss_mib": round(sampler.peak_kib / 1024), "hnsw_vector_s": builds.get("embedding"),
            "hnsw_bm25_s": builds.get("lex"), **sampler.phase(rows)}


def rerun(url: str, run: Path, collection: str) -> dict:
    """The same `corpusmill load` again: what it loaded (nothing, when the first one finished) and its wall."""
    import psycopg

    from jobs.store.names import chunk_table_name

    config = _config()
    count = f"SELECT count(*) FROM {SCHEMA}.{chunk_table_name(collection, common.MODEL, 384)}"
    with psycopg.connect(url) as conn:
        before = conn.execute(count).fetchone()[0]
    done = common.run([str(common.BIN / "corpusmill"), "load", "--from-parquet", str(run), "--collection", collection,
                       "--config", str(config)], log=common.out_dir() / f"scale-{collection}-rerun.log")
    out, wall = done["stdout"], done["wall_s"]
    with psycopg.connect(url) as conn:
        after = conn.execute(count).fetchone()[0]
    loaded = re.search(r"loaded (\d+) documents, (\d+) vectors", out)
    return {"wall_s": round(wall, 1), "documents": int(loaded.group(1)) if loaded else None,
            "vectors": int(loaded.group(2)) if loaded else None, "rows_before": before, "rows_after": after}


def plain_copy(url: str, run: Path, rows: int) -> dict:
    """pgvector's own rate: one session, one binary COPY per part of the embedded rows' id, breadcrumb,
    text and vector into a table of only those columns (a primary key, no other index, nothing computed).
    Every part is encoded (pgpq, as the writers encode theirs) before the first COPY opens, so what the
    phase times is the server taking the rows, not a client making them."""
    import psycopg
    from psycopg import sql

    from jobs.store.arrow_copy import stream, vector_bytes, vectors

    table = "bench_plain_copy"
    streams = []
    for part in sorted((run / "chunks").glob("part-*.parquet")):
        t = pq.read_table(part, columns=["chunk_id", "breadcrumb", "text", "embedding", "omitted"])
        t = t.filter(pc.invert(pc.fill_null(t.column("omitted"), False)))
        encoded = pa.table({"chunk_id": t.column("chunk_id").cast(pa.string()),
                            "breadcrumb": t.column("breadcrumb").cast(pa.string()),
                            "text": t.column("text").cast(pa.string()),
                            "embedding": vector_bytes(vectors(t.column("embedding"), t.column("chunk_id").to_pylist()))})
        streams.append(b"".join(stream(encoded)))
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(SCHEMA)))
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(SCHEMA, table)))
        conn.execute(sql.SQL("CREATE TABLE {} (chunk_id text PRIMARY KEY, breadcrumb text, text text, "
                             "embedding vector(384))").format(sql.Identifier(SCHEMA, table)))
        stmt = sql.SQL("COPY {} (chunk_id, breadcrumb, text, embedding) FROM STDIN WITH (FORMAT BINARY)").format(
            sql.Identifier(SCHEMA, table))
        with Sampler(url, table) as sampler:
            t0 = time.perf_counter()
            for data in streams:
                view = memoryview(data)
                with conn.transaction(), conn.cursor() as cur, cur.copy(stmt) as copy:
                    for at in range(0, len(view), 1 << 22):
                        copy.write(view[at:at + (1 << 22)])
            wall = time.perf_counter() - t0
            conn.execute("SELECT pg_stat_force_next_flush()")
            sampler.wait_for(rows)
    return {"wall_s": round(wall, 2), **sampler.phase(rows)}


def sizes(conn, table: str) -> dict:
    """MiB of the chunk table (heap with TOAST) and of each index, named by what it indexes."""
    out = {"table_mib": _mib(conn, "SELECT pg_table_size(%s::regclass)", f"{SCHEMA}.{table}")}
    for name, definition in conn.execute("SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s "
                                         "AND tablename = %s", (SCHEMA, table)):
        kind = ("hnsw_vector" if "hnsw" in definition and "embedding" in definition else
                "hnsw_bm25" if "hnsw" in definition else "gin_terms" if "gin (lex_terms)" in definition else name)
        out[f"{kind}_mib"] = _mib(conn, "SELECT pg_relation_size(%s::regclass)", f"{SCHEMA}.{name}")
    return out


def _mib(conn, query: str, name: str) -> float:
    return round(conn.execute(query, (name,)).fetchone()[0] / 2 ** 20, 1)


def questions() -> list[str]:
    lines = (openshift() / "golden.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["question"] for line in lines if line.strip()][:QUERIES]


def latency(store, coll, texts: list[str], vectors, mode: str, exact: bool = False) -> dict:
    """p50/p95 per query (ms) of one mode, each query searched alone after one warm-up pass."""
    from jobs.search import ranking  # as the store below: only the search step needs the read side

    timings = []
    for timed in (False, True):
        for q, v in zip(texts, vectors):
            t = time.perf_counter()
            ranking.search_many(store, coll, [v], 10, 100, exact, queries=[q], mode=mode)
            if timed:
                timings.append(1000 * (time.perf_counter() - t))
    timings.sort()
    return {"p50_ms": round(statistics.median(timings), 1),
            "p95_ms": round(timings[min(len(timings) - 1, math.ceil(0.95 * len(timings)) - 1)], 1)}


def bm25_agreement(store, coll, texts: list[str]) -> float:
    """The share of the indexed ranking's first 10 chunks that exact BM25 ranks as high as its own first
    10: each indexed hit scored again by exact BM25 against exact BM25's 10th score. By score, not by id,
    since the copies a size is made of score alike (a tag word no query holds sets them apart) and exact
    BM25's first 10 of a hundred tied copies is any 10 of them."""
    from psycopg import sql

    from jobs.search import bm25

    table = sql.Identifier(SCHEMA, coll.chunk_table)
    found = total = 0
    with store.conn.transaction():
        stats = bm25.corpus_stats(store.conn, SCHEMA, coll.chunk_table)
        for q in texts:
            exact = [s for _, s in bm25.bm25_scores(store.conn, table, q, 10, stats)]
            ids = [c for c, _ in bm25.scores(store.conn, SCHEMA, coll.chunk_table, q, 10)][:len(exact)]
            among = sql.SQL("chunk_id = ANY({})").format(sql.Literal(ids))
            again = [s for _, s in bm25.bm25_scores(store.conn, table, q, len(ids), stats, where=among)] if ids else []
            floor = min(exact, default=0.0) * (1 - 1e-9)
            found, total = found + sum(s >= floor for s in again), total + len(exact)
    return round(found / total, 3) if total else None


def search(url: str, collection: str, texts: list[str], vectors, rows: int) -> dict:
    from jobs.store.pgvector import PgStore

    with PgStore(url, SCHEMA) as store:
        store.migrate()
        coll = store.get_collection(collection)
        out = {"size": sizes(store.conn, coll.chunk_table)}
        out.update({mode: latency(store, coll, texts, vectors, mode) for mode in MODES})
        if rows <= EXACT_MAX:
            out["text_exact"] = latency(store, coll, texts, vectors, "text", exact=True)
        asked = texts if rows <= EXACT_MAX else texts[:AGREEMENT_QUERIES_LARGE]
        if asked:
            out["bm25_top10_agreement"] = bm25_agreement(store, coll, asked)
            out["bm25_agreement_queries"] = len(asked)
    return out


def growth(results: list[dict]) -> list[dict]:
    out = []
    for a, b in zip(results, results[1:]):
        row = {"from": a["rows"], "to": b["rows"]}
        for mode in MODES + ("text_exact",):
            if mode in a["search"] and mode in b["search"]:
                row[mode] = round(math.log(b["search"][mode]["p50_ms"] / a["search"][mode]["p50_ms"])
                                  / math.log(b["rows"] / a["rows"]), 2)
        out.append(row)
    return out


def bench() -> dict:
    from jobs.embed.backends import load_model

    url = common.database_url()
    seed_dir = seed_run()
    seed = seed_rows(seed_dir)
    texts = questions()
    vectors = load_model(common.MODEL).encode(texts, normalize_embeddings=True, show_progress_bar=False)
    results = []
    for size in SIZES:
        run = common.work_dir() / f"scale-{size}"
        rows = make_run(seed_dir, seed, size, run)
        collection = f"scale_{size}"
        entry = {"rows": rows, "plain_copy": plain_copy(url, run, rows),
                 "raw_copy": raw_copy(url, run, rows, build_index=False), "load": load(url, run, rows, collection)}
        for side in ("plain_copy", "raw_copy"):
            base = entry[side].get("rows_per_second")
            entry["load"][f"ratio_to_{side}"] = (round(entry["load"]["rows_per_second"] / base, 2)
                                                 if base and entry["load"].get("rows_per_second") else None)
        entry["rerun"] = rerun(url, run, collection)
        entry["search"] = search(url, collection, texts, vectors, rows)
        results.append(entry)
        common.save("scale", {"machine": common.machine(), "seed_rows": seed.num_rows, "queries": len(texts),
                              "sizes": results, "growth": growth(results)})  # kept as each size ends
    return {"machine": common.machine(), "seed_rows": seed.num_rows, "queries": len(texts), "sizes": results,
            "growth": growth(results)}


def report(r: dict) -> str:
    load_rows, size_rows, search_rows = [], [], []
    for s in r["sizes"]:
        ld, raw, sz, se = s["load"], s["raw_copy"], s["search"]["size"], s["search"]
        plain = s.get("plain_copy", {})
        load_rows.append([s["rows"], ld.get("rows_per_second"), plain.get("rows_per_second"),
                          ld.get("ratio_to_plain_copy"), raw.get("rows_per_second"), ld.get("ratio_to_raw_copy"),
                          ld.get("max_copy_sessions"), ld.get("hnsw_vector_s"), ld.get("hnsw_bm25_s"), ld["wall_s"]])
        size_rows.append([s["rows"], sz.get("table_mib"), sz.get("hnsw_vector_mib"), sz.get("hnsw_bm25_mib"),
                          sz.get("gin_terms_mib")])
        search_rows.append([s["rows"]] + [se[m][p] for m in MODES for p in ("p50_ms", "p95_ms")]
                           + [se.get("text_exact", {}).get("p50_ms"), se.get("bm25_top10_agreement"),
                              se.get("bm25_agreement_queries")])
    out = common.table(["chunks", "load rows/s", "plain COPY rows/s", "load ÷ plain", "chunk-table COPY rows/s",
                        "load ÷ chunk-table", "COPY sessions", "HNSW vector s", "HNSW BM25 s", "load wall s"], load_rows,
                       f"Scale: copies of {r['seed_rows']:,} real chunks, loaded by `corpusmill load`")
    out += common.table(["chunks", "documents loaded", "vectors loaded", "rows before", "rows after", "wall s"],
                        [[s["rows"]] + [s.get("rerun", {}).get(k) for k in ("documents", "vectors", "rows_before",
                                                                              "rows_after", "wall_s")]
                         for s in r["sizes"]], "The same load again (a rerun is a no-op)")
    out += common.table(["chunks", "table MiB", "HNSW vector MiB", "HNSW BM25 MiB", "GIN terms MiB"], size_rows, "Sizes")
    out += common.table(["chunks"] + [f"{m} {p}" for m in MODES for p in ("p50 ms", "p95 ms")]
                        + ["exact text p50 ms", "BM25 top-10 agreement", "agreement questions"], search_rows,
                        f"Search latency per query ({r['queries']} questions, k = 10)")
    out += common.table(["from", "to"] + [m for m in MODES + ("text_exact",)],
                        [[g["from"], g["to"]] + [g.get(m) for m in MODES + ("text_exact",)] for g in r["growth"]],
                        "Growth exponent of p50 latency (1 = linear in the collection, 0 = flat)")
    return out


def main(argv: list[str] | None = None) -> int:
    return common.run_one("scale", bench, report)


if __name__ == "__main__":
    sys.exit(main())
