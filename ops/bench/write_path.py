"""The write ceiling (#19): `corpusmill load --from-parquet` with 1, 2 and 4 writers against one raw
binary COPY of the same rows, in the same run, and the loading process's peak RSS at 2× and 64×.

    python -m ops.bench.write_path          # BENCH_WRITE_FILES=200 BENCH_WRITE_COPIES=64 BENCH_WRITERS=1,2,4

A default ingest of the first BENCH_WRITE_FILES hugo-docs pages gives a run directory; its Parquet is
copied BENCH_WRITE_COPIES times (distinct paths, chunk ids and text hashes, so every copy's rows are
really inserted, none recorded as shared text). Each side loads the same rows into a fresh chunk table
of the chunk table's shape (its terms and BM25 weights as plain columns, doc_id and text_sha256 indexes):

- raw COPY: one connection, one `COPY … FROM STDIN (FORMAT BINARY)` per Parquet part, fed by the same
  Arrow-to-COPY conversion the writers use (jobs/store/arrow_copy.py), then the HNSW build;
- corpusmill: `corpusmill load` as a user runs it (Ray start, the driver's first pass, writers), of the
  copies as one run of many parts, and as a history of BENCH_WRITE_COPIES runs of one part each (one
  `load --from-parquet RUN1 … RUNn`, with the most writers).

The loading phase of each is seen from the database, as the issue defines it: a sampler reads, every
0.2 s, the target table's committed rows (pg_stat_user_tables.n_tup_ins) and the rows COPY sessions
into it have read so far (pg_stat_progress_copy); the phase runs from the last sample before any row
arrives to the first with all of them committed. The rows in flight count toward its start: the
committed counter moves only at a commit, so by it alone a side's first transaction (a whole part, on
the raw side) would fall before the phase began. Index builds after it count on neither side. Peak
RSS: the loading process's own high-water mark (VmHWM), sampled while it runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml

from ops.bench import common

FILES = int(os.environ.get("BENCH_WRITE_FILES", "200"))
COPIES = int(os.environ.get("BENCH_WRITE_COPIES", "64"))
WRITERS = [int(w) for w in os.environ.get("BENCH_WRITERS", "1,2,4").split(",") if w.strip()]
SCHEMA = "corpusmill"


class Sampler:
    """Rows arriving in `table`, every `period` seconds, on its own connection: committed, read by COPY
    sessions still running, and those sessions."""

    def __init__(self, url: str, table: str, pid: int | None = None, period: float = 0.2):
        self.url, self.table, self.pid, self.period = url, table, pid, period
        # (time, committed rows, rows read by running COPY sessions, running COPY sessions)
        self.samples: list[tuple[float, int, int, int]] = []
        self.peak_kib = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def wait_for(self, rows: int, seconds: float = 15.0) -> None:
        """Keep sampling until the counter shows `rows` (a backend reports its counts at most once a
        second, and within ~10 s once idle) or `seconds` pass."""
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline and not (self.samples and self.samples[-1][1] >= rows):
            time.sleep(self.period)

    def _run(self) -> None:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self._stop.is_set():
                # pg_stat_* are per-transaction snapshots: autocommit gives each sample a fresh one.
                conn.execute("SELECT pg_stat_clear_snapshot()")
                ins = conn.execute("SELECT coalesce(sum(n_tup_ins), 0) FROM pg_stat_user_tables "
                                   "WHERE schemaname = %s AND relname = %s", (SCHEMA, self.table)).fetchone()[0]
                # A COPY's rows count in n_tup_ins only once its transaction ends; its progress row shows
                # them as they are read (the table may not exist yet: to_regclass is NULL, no rows).
                reading, sessions = conn.execute(
                    "SELECT coalesce(sum(tuples_processed), 0), count(*) FROM pg_stat_progress_copy "
                    "WHERE relid = to_regclass(%s)", (f"{SCHEMA}.{self.table}",)).fetchone()
                self.samples.append((time.perf_counter(), int(ins), int(reading), int(sessions)))
                if self.pid:
                    self.peak_kib = max(self.peak_kib, common.hwm_kib(self.pid))
                self._stop.wait(self.period)

    def phase(self, rows: int) -> dict:
        """The loading phase: from the last sample before rows arrive (read by a COPY, or committed) to
        the first with all of them committed."""
        start = next((i for i, s in enumerate(self.samples) if s[1] > 0 or s[2] > 0), None)
        end = next((s for s in self.samples if s[1] >= rows), None)
        if start is None or end is None:
            return {"rows": self.samples[-1][1] if self.samples else 0, "complete": False}
        t0 = self.samples[max(start - 1, 0)][0]
        seconds = max(end[0] - t0, self.period)
        return {"rows": rows, "seconds": round(seconds, 2), "rows_per_second": round(rows / seconds),
                "max_copy_sessions": max(s[3] for s in self.samples), "complete": True}


def raw_copy(url: str, run: Path, rows: int, build_index: bool = True) -> dict:
    """One connection COPYing every part into a fresh chunk table, then (`build_index`) the HNSW build."""
    from psycopg import sql

    from jobs.store import arrow_copy
    from jobs.store.pgvector import PgStore

    with PgStore(url, SCHEMA) as store:
        store.migrate()
        coll = store.ensure_collection("bench_raw_copy", common.MODEL, 384)
        store.conn.execute(sql.SQL("TRUNCATE {}").format(sql.Identifier(SCHEMA, coll.chunk_table)))
        with Sampler(url, coll.chunk_table) as sampler:
            t0 = time.perf_counter()
            for part in sorted((run / "chunks").glob("part-*.parquet")):
                t = pq.read_table(part)
                with store.conn.transaction():
                    arrow_copy.copy_table(store.conn, sql.Identifier(SCHEMA, coll.chunk_table),
                                          t.filter(pc.invert(t.column("omitted"))))
            wall = time.perf_counter() - t0
            # An idle backend reports its counts only after ~10 s; the writers report theirs as they exit.
            store.conn.execute("SELECT pg_stat_force_next_flush()")
            sampler.wait_for(rows)
        t1 = time.perf_counter()
        if build_index:
            store.ensure_hnsw_index(coll)
        hnsw = time.perf_counter() - t1
    return {"wall_s": round(wall, 2), "hnsw_s": round(hnsw, 2), **sampler.phase(rows)}


def copies(src: Path, dst: Path, n: int, distinct_text: bool = False) -> int:
    """`n` copies of `src`'s chunk parts under `dst` (a run directory), each copy's `source_path` and
    `chunk_id` made distinct (with `distinct_text`, its `text_sha256` too, so no copy is stored as
    shared text); returns the embedded (not omitted) rows written."""
    (dst / "chunks").mkdir(parents=True, exist_ok=True)
    if (src / "run.json").exists():
        shutil.copy(src / "run.json", dst / "run.json")
    renamed = ["source_path", "chunk_id"] + (["text_sha256"] if distinct_text else [])
    parts = [pq.read_table(p) for p in sorted((src / "chunks").glob("part-*.parquet"))]
    rows, k = 0, 0
    for c in range(n):
        for t in parts:
            for name in renamed:
                col = t.column(name)
                new = (pc.binary_join_element_wise(pa.scalar(f"copy{c}/"), col, "") if name == "source_path"
                       else pc.binary_join_element_wise(col, pa.scalar(f"-{c}"), ""))
                t = t.set_column(t.schema.get_field_index(name), name, new)
            pq.write_table(t, dst / "chunks" / f"part-{k:05d}.parquet")
            rows += pc.sum(pc.invert(t.column("omitted"))).as_py() or 0
            k += 1
    return rows


def history(src: Path, dst: Path, n: int) -> tuple[list[Path], int]:
    """`n` run directories of one part each, copy c of `src`'s rows in the c-th (distinct paths, ids and
    text hashes, as `copies` makes them): the shape of a history of small runs. Returns them and the rows."""
    big = dst / "all"
    rows = copies(src, big, n, distinct_text=True)
    parts = sorted((big / "chunks").glob("part-*.parquet"))
    per_copy = len(parts) // n
    runs = []
    for c in range(n):
        run = dst / f"run{c:03d}"
        (run / "chunks").mkdir(parents=True, exist_ok=True)
        table = pa.concat_tables([pq.read_table(p) for p in parts[c * per_copy:(c + 1) * per_copy]])
        pq.write_table(table, run / "chunks" / "part-00000.parquet")
        runs.append(run)
    shutil.rmtree(big)
    return runs, rows


def load(url: str, run: Path | list[Path], rows: int, writers: int, collection: str) -> dict:
    """`corpusmill load` of one run directory or a history of them into a fresh collection, sampled from
    the database."""
    from jobs.store.names import chunk_table_name

    table = chunk_table_name(collection, common.MODEL, 384)
    # Every row inserted, as the raw COPY inserts them: the pages' shared boilerplate stored each time.
    config = common.work_dir() / "write-path.yaml"
    raw = yaml.safe_load(common.CONFIG.read_text())
    raw["database"]["shared_text"] = "each"
    raw["excel"]["templates_dir"] = str(common.CONFIG.parent / raw["excel"]["templates_dir"])  # relative to the file
    config.write_text(yaml.safe_dump(raw))
    env = dict(os.environ, PYTHONPATH=str(common.REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    log = common.out_dir() / f"write-path-{collection}.log"
    t0 = time.perf_counter()
    with open(log, "w") as err:
        runs = [str(r) for r in (run if isinstance(run, list) else [run])]
        proc = subprocess.Popen([str(common.BIN / "corpusmill"), "load", "--from-parquet", *runs,
                                 "--collection", collection, "--writers", str(writers), "--config", str(config)],
                                cwd=common.REPO, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
        with Sampler(url, table, pid=proc.pid) as sampler:
            out, _ = proc.communicate()
            sampler.wait_for(rows)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"corpusmill load exited {proc.returncode}: {out}\n{log.read_text()[-3000:]}")
    return {"writers": writers, "wall_s": round(wall, 2), "peak_rss_mib": round(sampler.peak_kib / 1024),
            **sampler.phase(rows)}


def bench() -> dict:
    url = common.database_url()
    work = common.work_dir()
    corpus, files = common.corpus(FILES, "write-path")
    run = common.ingest(corpus, "bench_write_src", tag="write-path-source")
    src = Path(run["run_dir"])
    big, small = work / f"write-x{COPIES}", work / "write-x2"
    rows = copies(src, big, COPIES, distinct_text=True)
    rows_small = copies(src, small, 2, distinct_text=True)
    out = {"machine": common.machine(), "files": len(files), "copies": COPIES, "rows": rows,
           "raw_copy": raw_copy(url, big, rows), "load": []}
    for w in WRITERS:
        out["load"].append(load(url, big, rows, w, f"bench_write_w{w}"))
    best = max(WRITERS)
    # The same rows as a history of COPIES runs of one part each (a rebuilt database from nightly runs).
    runs, rows_runs = history(src, work / "write-history", COPIES)
    out["history"] = load(url, runs, rows_runs, best, "bench_write_hist")
    out["memory"] = {"x2": load(url, small, rows_small, best, "bench_write_mem2")["peak_rss_mib"],
                     "x64": next(r["peak_rss_mib"] for r in out["load"] if r["writers"] == best)}
    raw = out["raw_copy"].get("rows_per_second")
    for r in out["load"] + [out["history"]]:
        r["ratio_to_raw_copy"] = round(r["rows_per_second"] / raw, 2) if raw and r.get("rows_per_second") else None
    return out


def report(r: dict) -> str:
    rows = [["raw binary COPY (1 session)", r["raw_copy"].get("seconds"), r["raw_copy"].get("rows_per_second"),
             1.0, r["raw_copy"].get("max_copy_sessions"), None, r["raw_copy"]["wall_s"]]]
    for x in r["load"]:
        rows.append([f"corpusmill load, {x['writers']} writers", x.get("seconds"), x.get("rows_per_second"),
                     x.get("ratio_to_raw_copy"), x.get("max_copy_sessions"), x["peak_rss_mib"], x["wall_s"]])
    h = r.get("history")
    if h:
        rows.append([f"corpusmill load of {r['copies']} one-part runs, {h['writers']} writers", h.get("seconds"),
                     h.get("rows_per_second"), h.get("ratio_to_raw_copy"), h.get("max_copy_sessions"),
                     h["peak_rss_mib"], h["wall_s"]])
    table = common.table(["loader", "loading phase (s)", "rows/s", "ratio", "COPY sessions at once",
                          "peak RSS (MiB)", "wall (s)"], rows,
                         f"Write ceiling: {r['rows']:,} rows ({r['files']} pages × {r['copies']}), "
                         f"HNSW after raw COPY {r['raw_copy']['hnsw_s']} s")
    m = r["memory"]
    return table + f"\nloading process peak RSS: 2× {m['x2']} MiB, {r['copies']}× {m['x64']} MiB " \
                   f"(ratio {m['x64'] / max(m['x2'], 1):.2f})"


def main(argv: list[str] | None = None) -> int:
    return common.run_one("write_path", bench, report)


if __name__ == "__main__":
    sys.exit(main())
