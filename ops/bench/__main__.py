"""`make bench`: every benchmark in sequence in one private session, each printing its table and writing
its JSON to BENCH_OUT (default .corpusmill/bench), then a summary (bench.json).

    python -m ops.bench [overhead langchain stages loading write_path edits backends gpu]   # a subset, in this order

BENCH_FILES=200 runs the corpus benchmarks on the first 200 files (a quick check); the default is the
whole corpus, as the issue's figures are.
"""

from __future__ import annotations

import importlib
import sys
import time
import traceback

from ops.bench import common

ORDER = ("overhead", "langchain", "stages", "loading", "write_path", "edits", "backends", "gpu")
MODULES = {"overhead": "ops.bench.overhead", "langchain": "ops.bench.langchain_baseline", "stages": "ops.bench.stages",
           "loading": "ops.bench.loading", "write_path": "ops.bench.write_path", "edits": "ops.bench.edits",
           "backends": "ops.bench.backends", "gpu": "ops.bench.gpu"}


def summary(results: dict) -> dict:
    out: dict = {}
    if "overhead" in results:
        o = results["overhead"]
        out["overhead_ratio"] = o["ratio"]
        out["overhead_files"] = o["files"]
    if "langchain" in results:
        lc = results["langchain"]
        out["ratio_corpusmill_over_langchain"] = lc["ratio_corpusmill_over_langchain"]
        x = lc["xquad"]
        out["xquad_passage_recall@5"] = {
            "corpusmill": x["corpusmill"]["eval"]["by_level"].get("passage", {}).get("recall@5"),
            "langchain": x["langchain"]["eval"]["by_level"].get("passage", {}).get("recall@5")}
        d = lc["described"]
        out["described_document_recall@1"] = {
            side: d[side]["eval"]["by_level"].get("document", {}).get("recall@1") for side in ("corpusmill", "langchain")}
    if "loading" in results:
        out["copy_rows_per_second"] = {c["method"]: c["rows_per_second"] for c in results["loading"]["copy"]}
    if "write_path" in results:
        out["write_ratio_to_raw_copy"] = {f"{r['writers']} writers": r.get("ratio_to_raw_copy")
                                          for r in results["write_path"]["load"]}
    if "edits" in results:
        out["edit_runs"] = {x["run"]: {k: x[k] for k in ("ratio_to_full", "vectors_computed", "vectors_reused")}
                            for x in results["edits"]["runs"]}
    if "backends" in results:
        out["backend_speed_and_hit@1"] = {x["backend"]: f"{x['ratio_to_torch']}x, {x['hit@1']}"
                                          for x in results["backends"]["backends"]}
    if "stages" in results:
        s = results["stages"]
        out["scaling_wall_s"] = {f"{x['factor']}x ({x['files']} files)": x["wall_s"] for x in s["sizes"]}
        out["scaling_growth_vs_1x"] = s["growth_vs_1x"].get("wall")
    return out


def main(argv: list[str] | None = None) -> int:
    wanted = (sys.argv[1:] if argv is None else argv) or list(ORDER)
    unknown = [w for w in wanted if w not in MODULES]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; choose from {', '.join(MODULES)}", file=sys.stderr)
        return 2
    results, failed, t0 = {}, [], time.perf_counter()
    with common.session() as home:
        print(f"benchmarks: {', '.join(wanted)} · private CORPUSMILL_HOME {home} · JSON in {common.out_dir()}",
              flush=True)
        for name in sorted(wanted, key=lambda n: ORDER.index(n) if n in ORDER else len(ORDER)):
            module = importlib.import_module(MODULES[name])
            started = time.perf_counter()
            try:
                r = module.bench(False) if name == "gpu" else module.bench()
            except Exception:
                failed.append(name)
                print(f"\n{name}: FAILED\n{traceback.format_exc()}", flush=True)
                continue
            r["bench_seconds"] = round(time.perf_counter() - started, 1)
            results[name] = r
            common.save(name, r)
            print(module.report(r), flush=True)
    s = summary(results) | {"total_seconds": round(time.perf_counter() - t0, 1), "failed": failed}
    common.save("bench", s)
    print("\nSummary (bench.json)")
    for key, value in s.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}: {v:.3f}" if isinstance(v, float) else f"{k}: {v}" for k, v in value.items())
        print(f"  {key}: {value}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
