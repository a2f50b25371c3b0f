"""Per-query latency of `corpusmill serve` against one `corpusmill search` call, on one ingest of the
Markdown corpus (BENCH_FILES of it; 200 by default).

    python -m ops.bench.serve        # JSON in BENCH_OUT/serve.json

A `search` call is a process: imports, the model's load and the query. The service loads the model once,
so a query costs the query alone. Measured side by side in one session: N_CLI single `search` calls
(wall time from outside), then the service's start (until /collection answers) and every query of the
set over HTTP, in order, unfiltered and with a path filter; the service's first query (its warm-up) is
reported apart.
"""

from __future__ import annotations

import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time
import urllib.parse
import urllib.request

from ops.bench import common

COLLECTION = "serve"
N_CLI = 5


def _queries(files, n: int = 60) -> list[str]:
    """The corpus's own titles as queries (front matter `title:`), n of them."""
    out = []
    for path in files:
        m = re.search(r"^title:\s*['\"]?(.+?)['\"]?\s*$", path.read_text(encoding="utf-8", errors="replace"), re.M)
        if m:
            out.append(m.group(1))
        if len(out) == n:
            break
    return out


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> tuple[float, dict]:
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as r:
        body = json.loads(r.read())
    return (time.perf_counter() - t0) * 1000, body


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))]


def bench() -> dict:
    n = common.bench_files() or 200
    root, files = common.corpus(n)
    ingest = common.ingest(root, COLLECTION)
    queries = _queries(files)
    folder = files[0].relative_to(root).parts[0] if len(files[0].relative_to(root).parts) > 1 else None
    cli = [common.run([str(common.BIN / "corpusmill"), "search", "--collection", COLLECTION, "--json", q])["wall_s"]
           for q in queries[:N_CLI]]

    port = _port()
    base = f"http://127.0.0.1:{port}/"
    t0 = time.perf_counter()
    proc = subprocess.Popen([str(common.BIN / "corpusmill"), "serve", "--collection", COLLECTION, "--port", str(port)],
                            cwd=common.REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=dict(os.environ))
    try:
        while True:
            try:
                _get(base + "collection")
                break
            except OSError:
                if proc.poll() is not None or time.perf_counter() - t0 > 300:
                    raise RuntimeError("corpusmill serve did not start") from None
                time.sleep(0.2)
        started = time.perf_counter() - t0
        first, _ = _get(base + "search?" + urllib.parse.urlencode({"q": queries[0]}))
        plain = [_get(base + "search?" + urllib.parse.urlencode({"q": q}))[0] for q in queries]
        filtered, hits = [], []
        for q in queries:
            ms, body = _get(base + "search?" + urllib.parse.urlencode({"q": q, "filter": f"path={folder}/**"}))
            filtered.append(ms)
            hits.append(len(body["hits"]))
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    return {"machine": common.machine(), "files": len(files), "chunks": ingest["metrics"]["chunks"]["embedded"],
            "queries": len(queries), "cli_call_s": cli, "cli_call_s_median": statistics.median(cli),
            "serve_start_s": started, "serve_first_query_ms": first,
            "serve_ms": {"p50": _pct(plain, 0.5), "p95": _pct(plain, 0.95)},
            "serve_filtered_ms": {"p50": _pct(filtered, 0.5), "p95": _pct(filtered, 0.95), "filter": f"path={folder}/**",
                                  "mean_hits": statistics.mean(hits)},
            "ratio_cli_over_serve_p50": statistics.median(cli) * 1000 / _pct(plain, 0.5)}


def report(r: dict) -> str:
    return common.table(
        ["", "per query (p50)", "p95"],
        [["corpusmill search (one call)", f"{r['cli_call_s_median']:.2f} s", f"{max(r['cli_call_s']):.2f} s (max)"],
         ["corpusmill serve, GET /search", f"{r['serve_ms']['p50']:.1f} ms", f"{r['serve_ms']['p95']:.1f} ms"],
         [f"  with --filter {r['serve_filtered_ms']['filter']}", f"{r['serve_filtered_ms']['p50']:.1f} ms",
          f"{r['serve_filtered_ms']['p95']:.1f} ms"]],
        title=f"serve: {r['files']} files, {r['chunks']} chunks, {r['queries']} queries; service start "
              f"{r['serve_start_s']:.1f} s, first query {r['serve_first_query_ms']:.0f} ms; "
              f"one search call / one served query: {r['ratio_cli_over_serve_p50']:.0f}x")


if __name__ == "__main__":
    sys.exit(common.standalone("serve", bench, report))
