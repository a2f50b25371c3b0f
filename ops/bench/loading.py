"""Loading: vector rows/s with COPY BINARY over 1, 2 and 4 parallel streams, row-by-row INSERT for scale,
and HNSW built after the load vs inserting into an already indexed table (vector and halfvec).

    python -m ops.bench.loading       # BENCH_LOAD_ROWS=20000 BENCH_INDEXED_ROWS=5000

Rows are contract chunk rows of realistic size (≈1 kB of text twice, as `text` and `embed_text`) with
random unit 384-dimension vectors, loaded into scratch tables shaped like the chunk table (primary key
on chunk_id) in schema `bench` of the embedded server.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from ops.bench import common

DIM = 384
SCHEMA = "bench"


def make_rows(n: int, seed: int = 7) -> list[dict]:
    import numpy as np

    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((n, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    words = ("shortcode front matter template partial render hook taxonomy page bundle resource image "
             "processing menu section archetype module mount server").split()
    rows = []
    for i in range(n):
        body = " ".join(words[(i + j) % len(words)] for j in range(140))
        rows.append({
            "chunk_id": f"bench-{i:08d}", "collection": "bench", "doc_id": f"doc-{i // 4:07d}",
            "source_path": f"docs/page-{i // 4}.md", "source_type": "markdown", "heading_path": ["Page", "Section"],
            "breadcrumb": "Page › Section", "text": body, "embed_text": "Page › Section\n" + body, "seq": i % 4,
            "char_start": 0, "char_end": len(body), "sheet": None, "row": None, "tags": ["h2", "p"],
            "token_count": 180, "word_count": 140, "quality": "ok", "omitted": False, "omit_reason": None,
            "text_sha256": f"{i:064x}", "pipeline_fingerprint": "bench", "run_id": "bench",
            "embedding": vectors[i], "embedding_model": common.MODEL,
        })
    return rows


def _connect(url: str):
    import psycopg
    from pgvector.psycopg import register_vector

    conn = psycopg.connect(url)
    conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    conn.commit()
    register_vector(conn)
    return conn


def copy_streams(url: str, rows: list[dict], streams: int, table: str, vector_type: str = "vector",
                 batch_rows: int = 5000) -> float:
    """Load `rows` into `table` with `streams` connections in parallel, each COPYing its share in
    transactions of `batch_rows`. Returns wall seconds."""
    shards = [rows[i::streams] for i in range(streams)]
    errors: list[BaseException] = []

    def load(shard: list[dict]) -> None:
        try:
            with _connect(url) as conn:
                for start in range(0, len(shard), batch_rows):
                    common.copy_rows(conn, SCHEMA, table, shard[start:start + batch_rows], vector_type)
                    conn.commit()
        except BaseException as exc:  # reported by the caller
            errors.append(exc)

    threads = [threading.Thread(target=load, args=(s,)) for s in shards]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - t0


def _fresh(url: str, table: str, vector_type: str = "vector") -> None:
    with _connect(url) as conn:
        common.create_scratch_table(conn, SCHEMA, table, DIM, vector_type)


def _hnsw_sql(table: str, vector_type: str) -> str:
    ops = "halfvec_cosine_ops" if vector_type == "halfvec" else "vector_cosine_ops"
    return f'CREATE INDEX ON {SCHEMA}."{table}" USING hnsw (embedding {ops}) WITH (m = 16, ef_construction = 64)'


def build_index(url: str, table: str, vector_type: str, workers: int) -> float:
    with _connect(url) as conn:
        conn.execute("SET maintenance_work_mem = '512MB'")
        conn.execute(f"SET max_parallel_maintenance_workers = {int(workers)}")
        t0 = time.perf_counter()
        conn.execute(_hnsw_sql(table, vector_type))
        conn.commit()
        return time.perf_counter() - t0


def insert_rows(url: str, rows: list[dict], table: str) -> float:
    """Row-by-row INSERT in one transaction: what a naive loader does."""
    import numpy as np
    from psycopg import sql

    from jobs.store.pgvector import CHUNK_COLUMNS

    cols = [c for c, _ in CHUNK_COLUMNS]
    stmt = sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
        sql.Identifier(SCHEMA, table), sql.SQL(", ").join(map(sql.Identifier, cols)),
        sql.SQL(", ").join(sql.Placeholder() * len(cols)))
    with _connect(url) as conn:
        t0 = time.perf_counter()
        for r in rows:
            conn.execute(stmt, [np.asarray(r[c]) if c == "embedding" else r[c] for c in cols])
        conn.commit()
        return time.perf_counter() - t0


def bench() -> dict:
    url = common.database_url()
    n = int(os.environ.get("BENCH_LOAD_ROWS") or 20000)
    n_indexed = min(n, int(os.environ.get("BENCH_INDEXED_ROWS") or 5000))
    n_insert = min(n, 2000)
    rows = make_rows(n)
    out: dict = {"rows": n, "dimension": DIM, "machine": common.machine(), "copy": [], "hnsw": []}

    for streams in (1, 2, 4):
        _fresh(url, "load_copy")
        seconds = copy_streams(url, rows, streams, "load_copy")
        out["copy"].append({"method": f"COPY BINARY, {streams} stream{'s' if streams > 1 else ''}", "streams": streams,
                            "rows": n, "seconds": round(seconds, 3), "rows_per_second": round(n / seconds)})
    _fresh(url, "load_halfvec", "halfvec")
    seconds = copy_streams(url, rows, 2, "load_halfvec", "halfvec")
    out["copy"].append({"method": "COPY BINARY halfvec, 2 streams", "streams": 2, "rows": n,
                        "seconds": round(seconds, 3), "rows_per_second": round(n / seconds)})
    _fresh(url, "load_insert")
    seconds = insert_rows(url, rows[:n_insert], "load_insert")
    out["copy"].append({"method": "row-by-row INSERT", "streams": 1, "rows": n_insert, "seconds": round(seconds, 3),
                        "rows_per_second": round(n_insert / seconds)})

    # HNSW: bulk load then build, vs load into a table that already has the index (same rows).
    sub = rows[:n_indexed]
    cpu_workers = max(1, min((os.cpu_count() or 2) - 1, 7))
    for vector_type in ("vector", "halfvec"):
        for workers in sorted({0, cpu_workers}):
            _fresh(url, "hnsw_after", vector_type)
            load_s = copy_streams(url, sub, 1, "hnsw_after", vector_type)
            index_s = build_index(url, "hnsw_after", vector_type, workers)
            out["hnsw"].append({"method": f"COPY then build ({vector_type}, {workers} parallel workers)",
                                "vector_type": vector_type, "workers": workers, "rows": n_indexed,
                                "load_s": round(load_s, 3), "index_s": round(index_s, 3),
                                "total_s": round(load_s + index_s, 3),
                                "rows_per_second": round(n_indexed / (load_s + index_s))})
        _fresh(url, "hnsw_before", vector_type)
        with _connect(url) as conn:
            conn.execute(_hnsw_sql("hnsw_before", vector_type))
            conn.commit()
        load_s = copy_streams(url, sub, 1, "hnsw_before", vector_type)
        out["hnsw"].append({"method": f"COPY into indexed table ({vector_type})", "vector_type": vector_type,
                            "workers": None, "rows": n_indexed, "load_s": round(load_s, 3), "index_s": 0.0,
                            "total_s": round(load_s, 3), "rows_per_second": round(n_indexed / load_s)})
    with _connect(url) as conn:
        for table in ("load_copy", "load_halfvec", "load_insert", "hnsw_after", "hnsw_before"):
            conn.execute(f'DROP TABLE IF EXISTS {SCHEMA}."{table}"')
    return out


def report(r: dict) -> str:
    copy = common.table(["method", "rows", "seconds", "rows/s"],
                        [[c["method"], c["rows"], c["seconds"], c["rows_per_second"]] for c in r["copy"]],
                        f"Loading {r['dimension']}-d vectors with their chunk rows")
    hnsw = common.table(["HNSW (m 16, ef_construction 64)", "rows", "load s", "index s", "total s", "rows/s"],
                        [[h["method"], h["rows"], h["load_s"], h["index_s"], h["total_s"], h["rows_per_second"]]
                         for h in r["hnsw"]], "HNSW after bulk load vs an indexed table")
    return copy + "\n" + hnsw + "\n"


def main() -> int:
    return common.run_one("loading", bench, report)


if __name__ == "__main__":
    sys.exit(main())
