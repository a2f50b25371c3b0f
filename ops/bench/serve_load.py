"""`corpusmill serve` under load: the default (hybrid) search at 1, 4 and 16 concurrent clients.

    python -m ops.bench.serve_load     # JSON in BENCH_OUT/serve_load.json
    BENCH_HOME=/tmp/cm-load BENCH_SERVE_ROWS=100000 BENCH_SERVE_SECONDS=60 python -m ops.bench.serve_load

The collection: a default ingest of BENCH_FILES (200) Markdown files of the corpus, copied and perturbed
to BENCH_SERVE_ROWS chunks (100k) as ops/bench/scale.py does (own paths, a tag word in the text, vectors
moved by noise), loaded with `corpusmill load`. With BENCH_HOME set the collection stays there, and a later
run with the same size reuses it.

Then `corpusmill serve` as a user starts it, and for each concurrency C (BENCH_SERVE_CLIENTS, 1,4,16)
C client threads, each with its own keep-alive HTTP connection, send GET /search?q=… back to back for
BENCH_SERVE_SECONDS (60) seconds: the corpus's titles as queries, each client starting at its own place
in the list. Per level: queries answered per second, p50/p95/p99 latency, and errors (any answer but
200, or a failed connection). The clients run in this process, on the same machine as the service and
the database: the figures include their share of the CPU. BENCH_SERVE_POOL=N starts the service with
`--pool-size N`; 1 runs the searches one at a time, as the service did before its pool.
"""

from __future__ import annotations

import http.client
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path

from ops.bench import common, scale
from ops.bench.serve import _port, _queries

ROWS = int(os.environ.get("BENCH_SERVE_ROWS", "100000"))
SECONDS = float(os.environ.get("BENCH_SERVE_SECONDS", "60"))
CLIENTS = [int(c) for c in os.environ.get("BENCH_SERVE_CLIENTS", "1,4,16").split(",") if c.strip()]
POOL = os.environ.get("BENCH_SERVE_POOL")  # serve --pool-size (default: serve's own); 1 runs searches one at a time
SEED_FILES = 200
WARM_SECONDS = float(os.environ.get("BENCH_SERVE_WARM_SECONDS", "30"))


def _collection_rows(url: str, name: str) -> int | None:
    import psycopg

    with psycopg.connect(url) as conn:
        try:
            row = conn.execute("SELECT chunk_table FROM corpusmill.collections WHERE name = %s", (name,)).fetchone()
        except psycopg.errors.UndefinedTable:
            return None
        if row is None:
            return None
        return conn.execute(f'SELECT count(*) FROM corpusmill."{row[0]}" WHERE NOT omitted').fetchone()[0]


def build(rows: int) -> dict:
    """The collection of about `rows` chunks (reused when BENCH_HOME already holds it)."""
    url = common.database_url()
    name = f"serve_load_{rows}"
    have = _collection_rows(url, name)
    if have:
        return {"collection": name, "rows": have, "reused": True}
    files = common.bench_files() or SEED_FILES
    marker = common.work_dir() / f"serve-load-seed-{files}.txt"
    if marker.exists():
        seed_dir = Path(marker.read_text().strip())
    else:
        root, _ = common.corpus(files, name="serve-load-corpus")
        seed_dir = Path(common.ingest(root, "serve_load_seed", tag="serve-load-seed")["run_dir"])
        marker.write_text(str(seed_dir))
    dest = common.work_dir() / f"serve-load-run-{rows}"
    made = scale.make_run(seed_dir, scale.seed_rows(seed_dir), rows, dest)
    loaded = scale.load(url, dest, made, name)
    return {"collection": name, "rows": made, "reused": False, "load": loaded}


def _pct(values: list[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))], 1)


def _client(port: int, paths: list[str], stop: float, out: list, errors: list) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    i = 0
    while time.perf_counter() < stop:
        path = paths[i % len(paths)]
        i += 1
        t0 = time.perf_counter()
        try:
            conn.request("GET", path)
            r = conn.getresponse()
            body = r.read()
            if r.status != 200:
                errors.append(f"{r.status}: {body[:200]!r}")
                continue
        except OSError as exc:  # a dropped connection counts, and the client opens another
            errors.append(f"{type(exc).__name__}: {exc}")
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            continue
        out.append((time.perf_counter() - t0) * 1000)
    conn.close()


def level(port: int, queries: list[str], clients: int, seconds: float) -> dict:
    """`clients` threads searching back to back for `seconds`."""
    paths = ["/search?" + urllib.parse.urlencode({"q": q}) for q in queries]
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors: list[str] = []
    stop = time.perf_counter() + seconds
    threads = [threading.Thread(target=_client, args=(port, paths[c * 7 % len(paths):] + paths[:c * 7 % len(paths)],
                                                      stop, latencies[c], errors)) for c in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    done = [ms for per in latencies for ms in per]
    return {"clients": clients, "seconds": round(wall, 1), "queries": len(done), "qps": round(len(done) / wall, 2),
            "p50_ms": _pct(done, 0.50), "p95_ms": _pct(done, 0.95), "p99_ms": _pct(done, 0.99),
            "mean_ms": round(statistics.mean(done), 1) if done else None, "errors": len(errors),
            "error_samples": errors[:5]}


def _wait_ready(port: int, proc: subprocess.Popen, limit: float = 600) -> float:
    t0 = time.perf_counter()
    while True:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/collection")
            if conn.getresponse().status == 200:
                return time.perf_counter() - t0
        except OSError:
            pass
        if proc.poll() is not None or time.perf_counter() - t0 > limit:
            raise RuntimeError("corpusmill serve did not start")
        time.sleep(0.3)


def bench() -> dict:
    built = build(ROWS)
    _, files = common.corpus(common.bench_files() or SEED_FILES, name="serve-load-queries")
    queries = _queries(files, 60)
    port = _port()
    log = common.out_dir() / "serve_load.serve.log"
    with open(log, "w") as err:
        proc = subprocess.Popen([str(common.BIN / "corpusmill"), "serve", "--collection", built["collection"],
                                 "--port", str(port)] + (["--pool-size", POOL] if POOL else []), cwd=common.REPO,
                                stdout=subprocess.DEVNULL, stderr=err, env=dict(os.environ))
        try:
            started = _wait_ready(port, proc)
            # Warm-up, untimed: every query once, so that each level reads the same pages from memory
            # (the first level would otherwise pay for the tables' and indexes' first reads alone).
            warm = level(port, queries, 4, WARM_SECONDS)
            levels = [level(port, queries, c, SECONDS) for c in CLIENTS]
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    one = next((r for r in levels if r["clients"] == 1), None)
    for r in levels:
        r["x_one_client"] = round(r["qps"] / one["qps"], 2) if one and one["qps"] else None
    return {"machine": common.machine(), **built, "queries": len(queries), "mode": "hybrid (default)",
            "seconds_per_level": SECONDS, "pool_size": POOL or "default", "serve_start_s": round(started, 1),
            "warm_up": {k: warm[k] for k in ("seconds", "queries", "errors")}, "load_avg_1m": os.getloadavg()[0],
            "levels": levels}


def report(r: dict) -> str:
    return common.table(
        ["clients", "queries/s", "x 1 client", "p50 ms", "p95 ms", "p99 ms", "errors"],
        [[x["clients"], x["qps"], x["x_one_client"], x["p50_ms"], x["p95_ms"], x["p99_ms"], x["errors"]]
         for x in r["levels"]],
        title=f"serve under load: collection {r['collection']} ({r['rows']:,} chunks), {r['mode']}, "
              f"{r['seconds_per_level']:g} s per level, pool {r['pool_size']}, service start {r['serve_start_s']} s, "
              f"load average {r['load_avg_1m']:.1f} after the run")


if __name__ == "__main__":
    sys.exit(common.standalone("serve_load", bench, report))
