"""Is the ingest driver's growth ours? Python's own allocations against the process's peak RSS, at 1× and N×.

    python -m ops.bench.driver_heap            # BENCH_SCALE_BASE=40, factors 1 and 16 (BENCH_HEAP_FACTORS)

For each factor of the synthetic corpus of `stages` (BENCH_SCALE_BASE files spread over the corpus,
copied), one subprocess runs `run_ingest` of configs/local.yaml in-process under tracemalloc and prints
the traced peak (what Python objects held at most) and ru_maxrss (the whole process: Python, Ray's core
worker, Arrow, gRPC). Growth in the second but not the first is native memory, not the plan's or the
stages' Python objects. Not part of `make bench`.
"""

from __future__ import annotations

import json
import os
import sys

from ops.bench import common


def measure(root: str, collection: str) -> dict:
    """In this process: one ingest under tracemalloc."""
    import resource
    import tracemalloc

    from jobs.config import load_config
    from jobs.ingest import run_ingest

    cfg = load_config(common.CONFIG)
    cfg = cfg.model_copy(update={"collection": collection, "input": cfg.input.model_copy(update={"roots": [root]})})
    tracemalloc.start()
    run_ingest(cfg)
    peak = tracemalloc.get_traced_memory()[1]
    return {"python_peak_mib": round(peak / 2**20, 1),
            "maxrss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--one"]:
        print(json.dumps(measure(argv[1], argv[2])))
        return 0
    base = int(os.environ.get("BENCH_SCALE_BASE") or 40)
    factors = [int(f) for f in (os.environ.get("BENCH_HEAP_FACTORS") or "1,16").split(",")]
    print("| factor | files | Python peak (tracemalloc) | process ru_maxrss |\n| --- | --- | --- | --- |")
    with common.session():
        for factor in factors:
            root, files = common.synthetic_corpus(base, factor)
            r = common.python("ops.bench.driver_heap", "--one", str(root), f"bench_heap_{factor}x")
            print(f"| {factor}× | {len(files)} | {r['python_peak_mib']} MiB | {r['maxrss_mib']} MiB |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
