"""Whether a Ray cluster can run a job's actor pools at all.

Ray Data starts a fixed actor pool with the actors Ray can place and works with those, so a pool larger than
the cluster is only slower. Two shapes never finish, and say "committed 0/N" for ever: a pool none of whose
actors fits on any node (configs/gpu.yaml's sentence actors, a GPU share each, on a machine without a GPU),
and tasks that feed a pool (parse and chunk before the actors, Excel rows, range reads of the work items)
finding no CPU left once the pools' actors hold them all. This says so before the run is recorded: a
local Ray that this run started cannot grow, so there it is an error; a Ray joined (a cluster, which an
autoscaler may grow) gets a warning that says what the run waits for.
"""

from __future__ import annotations

from dataclasses import dataclass

from jobs.config import JobConfig

_EPS = 1e-9  # GPU shares are fractions (0.125 × 8 must fit one GPU)
READ_TASK_CPUS = 0.25  # the range-read tasks of the work items (jobs/on_ray.py build_dataset)


@dataclass(frozen=True)
class Pool:
    """One actor pool: `actors` of `cpus` and `gpus` each, sized by the config keys in `keys`."""

    stage: str
    actors: int
    cpus: float
    gpus: float
    keys: str


@dataclass(frozen=True)
class Feed:
    """The tasks upstream of the pools that must find a CPU beside them: the largest one's CPUs, and the
    config keys that size them. cpus 0: nothing runs upstream (a small local Markdown run, fused)."""

    cpus: float = 0.0
    keys: str = ""


def pools(cfg: JobConfig, embed_actors: int, embed_workers: int, sentences: bool = True) -> list[Pool]:
    """The run's actor pools: the sentence actors (the Markdown branch's; fused with parse and chunk on a
    local CPU Ray, with the same resources) and the embedding actors as jobs/embed/layout.py sized them."""
    out = []
    if sentences:
        s = cfg.sentences.resources
        out.append(Pool("sentences", s.pool_size or 1, s.num_cpus, s.num_gpus,
                        "sentences.resources: pool_size, num_cpus, num_gpus"))
    e = cfg.embedding.resources
    out.append(Pool("embedding", embed_actors, e.num_cpus * embed_workers, e.num_gpus,
                    "embedding.resources: pool_size, num_cpus, num_gpus; embedding.workers_per_actor"))
    return out


def feed(cfg: JobConfig, counts: dict[str, int], fused: bool) -> Feed:
    """The tasks of an ingest upstream of its pools, as jobs/on_ray.py build_dataset lays them out: parse and
    chunk unless fused into the sentence actors, one Excel task a workbook, and range reads where a source
    type has more files than the driver hands over whole."""
    parts: list[tuple[float, str]] = []
    if counts.get("markdown") and not fused:
        parts += [(cfg.ray.parse.num_cpus, "ray.parse"), (cfg.ray.chunk.num_cpus, "ray.chunk")]
    if counts.get("excel"):
        parts.append((cfg.ray.excel.num_cpus, "ray.excel"))
    if not cfg.input.read_via_driver and any(n > cfg.ray.driver_items_max for n in counts.values()):
        parts.append((READ_TASK_CPUS, "ray.driver_items_max"))
    if not parts:
        return Feed()
    return Feed(max(c for c, _ in parts), " / ".join(k for _, k in parts))


def _amount(cpus: float, gpus: float = 0.0) -> str:
    cpus, gpus = round(cpus, 6), round(gpus, 6)  # 0.125 × 8 is 1, not 1.0000000000000002
    cpu = f"{cpus:g} CPU{'s' if cpus > 1 else ''}"
    return f"{cpu} and {gpus:g} GPU{'s' if gpus > 1 else ''}" if gpus else cpu


def shortfall(wanted: list[Pool], nodes: list[dict], upstream: Feed) -> str | None:
    """None when the run can go on the live `nodes` (each a Ray resources dict); else what never fits,
    naming the config keys that size it: a pool with no node that holds one of its actors, or, where tasks
    feed the pools, pools that with one such task need more CPUs than the nodes have."""
    have_cpu = sum(n.get("CPU", 0) for n in nodes)
    have_gpu = sum(n.get("GPU", 0) for n in nodes)
    problems = []
    for p in wanted:
        if p.actors and not any(n.get("CPU", 0) + _EPS >= p.cpus and n.get("GPU", 0) + _EPS >= p.gpus for n in nodes):
            problems.append(f"no node has {_amount(p.cpus, p.gpus)} for one {p.stage} actor")
    need = sum(p.actors * p.cpus for p in wanted) + upstream.cpus
    if upstream.cpus and need > have_cpu + _EPS:
        problems.append(f"its actors would hold every CPU the tasks that feed them need: the pools and one such "
                        f"task ({_amount(upstream.cpus)}, {upstream.keys}) need {_amount(need)}")
    if not problems:
        return None
    pools_text = "; ".join(f"{p.stage}: {p.actors} × {_amount(p.cpus, p.gpus)} ({p.keys})" for p in wanted)
    count = len(nodes)
    has = _amount(have_cpu, have_gpu) if have_gpu else _amount(have_cpu) + " and no GPU"
    return (f"Ray cannot run this job's actor pools: {', and '.join(problems)}, where the cluster has {has} "
            f"in {count} node{'' if count == 1 else 's'} ({pools_text})")
