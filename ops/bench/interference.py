"""Why CPU embedding runs one single-threaded encoder per core: the same encode as one process with
every core's torch threads, one single-threaded process per core, and one process with one
single-threaded encoder worker (thread) per core (the embedding actor of configs/local.yaml), alone
and beside background processes that take short bursts of CPU (as Ray's daemons, the driver and the
parse/chunk workers do).

    python -m ops.bench interference          # BENCH_INTERFERENCE_TEXTS (1200), BENCH_INTERFERENCE_DUTY (0.3)

Texts come from the fixture corpus (gpu.texts_from_fixtures); each encoder is its own subprocess timed
from the inside (model loaded first), so only the encode is compared. Slowdown = beside / alone.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from ops.bench import common

BURST_S = 0.003


def _burn(duty: float) -> None:
    """Busy for BURST_S, then idle, so the process takes `duty` of one core in short bursts."""
    while True:
        t = time.perf_counter()
        while time.perf_counter() - t < BURST_S:
            pass
        time.sleep(BURST_S * (1 - duty) / duty)


def _encode(threads: int, workers: int, start: int, n: int, total: int) -> float:
    from jobs.embed.encoder import Embedder
    from ops.bench.gpu import texts_from_fixtures

    texts = texts_from_fixtures(total)[start:start + n]
    embedder = Embedder(common.MODEL, device="cpu", torch_threads=threads, workers=workers)
    t0 = time.perf_counter()
    embedder.encode(texts)
    return time.perf_counter() - t0


def _spawn(*args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(common.REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen([sys.executable, "-m", "ops.bench.interference", *args], cwd=common.REPO, env=env,
                            stdout=subprocess.PIPE, text=True)


def shape(processes: int, threads: int, workers: int, texts: int, burners: int, duty: float) -> float:
    """Wall seconds until every encoder process is done (each encodes its share of the texts)."""
    noise = [_spawn("burn", str(duty)) for _ in range(burners)]
    try:
        share = -(-texts // processes)
        procs = [_spawn("encode", str(threads), str(workers), str(i * share), str(share), str(texts))
                 for i in range(processes)]
        return max(float(p.communicate()[0].strip().splitlines()[-1]) for p in procs)
    finally:
        for p in noise:
            p.kill()
            p.wait()


def bench() -> dict:
    cores = os.cpu_count() or 1
    texts = int(os.environ.get("BENCH_INTERFERENCE_TEXTS") or 1200)
    duty = float(os.environ.get("BENCH_INTERFERENCE_DUTY") or 0.3)
    shapes = {f"1 process x {cores} threads": (1, cores, 1), f"{cores} processes x 1 thread": (cores, 1, 1),
              f"1 process x {cores} workers x 1 thread": (1, 1, cores)}
    out = {"machine": common.machine(), "texts": texts, "burners": 2, "burner_duty": duty, "shapes": {}}
    for name, (procs, threads, workers) in shapes.items():
        alone = shape(procs, threads, workers, texts, 0, duty)
        beside = shape(procs, threads, workers, texts, 2, duty)
        out["shapes"][name] = {"alone_s": round(alone, 2), "beside_s": round(beside, 2),
                               "slowdown": round(beside / alone, 3)}
    return out


def report(r: dict) -> str:
    rows = [[name, s["alone_s"], s["beside_s"], s["slowdown"]] for name, s in r["shapes"].items()]
    return common.table(["encoder shape", "alone s", "beside bursts s", "slowdown"], rows,
                        f"Encoding {r['texts']} texts beside 2 processes each taking {r['burner_duty']:.0%} of a "
                        f"core in {BURST_S * 1000:.0f} ms bursts") + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "burn":
        _burn(float(argv[1]))
    if argv and argv[0] == "encode":
        print(_encode(*(int(a) for a in argv[1:6])))
        return 0
    return common.run_one("interference", bench, report)


if __name__ == "__main__":
    sys.exit(main())
