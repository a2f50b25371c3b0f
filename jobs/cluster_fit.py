"""Whether a Ray cluster can hold a run's actor pools at once.

Ray Data starts every actor pool of a job before the first batch goes through it, and waits, without a word,
until the cluster can place them all: a pool that asks for a GPU on a machine without one (configs/gpu.yaml on
a laptop), more sentence actors than the cores there are, or GPU actors on a cluster whose GPU nodes are not
up is a run that says "committed 0/N" for ever. This compares what the pools ask with what the cluster's live
nodes have, before the run is recorded: a local Ray cannot grow, so there it is an error; a cluster may (an
autoscaler adding nodes), so there it is a warning that says what the run waits for.
"""

from __future__ import annotations

from dataclasses import dataclass

from jobs.config import JobConfig

_EPS = 1e-9  # GPU shares are fractions (0.125 × 8 must fit one GPU)


@dataclass(frozen=True)
class Pool:
    """One actor pool: `actors` of `cpus` and `gpus` each, sized by the config keys in `keys`."""

    stage: str
    actors: int
    cpus: float
    gpus: float
    keys: str


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


def task_cpus(cfg: JobConfig) -> float:
    """The CPUs one parse, chunk or Excel task holds: at least one must run beside the pools."""
    return max(cfg.ray.parse.num_cpus, cfg.ray.chunk.num_cpus, cfg.ray.excel.num_cpus)


def _amount(cpus: float, gpus: float) -> str:
    cpu = f"{cpus:g} CPU{'s' if cpus > 1 else ''}"
    return f"{cpu} and {gpus:g} GPU{'s' if gpus > 1 else ''}" if gpus else cpu


def shortfall(wanted: list[Pool], nodes: list[dict], slot: float) -> str | None:
    """None when the pools and one task slot of `slot` CPUs fit the live `nodes` (each a Ray resources
    dict); else what is missing, naming the config keys that size each pool. Totals and one actor per
    node are checked; how Ray packs many actors onto nodes is its own affair."""
    have_cpu = sum(n.get("CPU", 0) for n in nodes)
    have_gpu = sum(n.get("GPU", 0) for n in nodes)
    problems = []
    for p in wanted:
        if p.actors and not any(n.get("CPU", 0) + _EPS >= p.cpus and n.get("GPU", 0) + _EPS >= p.gpus for n in nodes):
            problems.append(f"no node has {_amount(p.cpus, p.gpus)} for one {p.stage} actor")
    need_cpu = sum(p.actors * p.cpus for p in wanted) + slot
    need_gpu = sum(p.actors * p.gpus for p in wanted)
    if need_cpu > have_cpu + _EPS or need_gpu > have_gpu + _EPS:
        problems.append(f"together they and one parse/chunk task need {_amount(need_cpu, need_gpu)}")
    if not problems:
        return None
    pools_text = "; ".join(f"{p.stage}: {p.actors} × {_amount(p.cpus, p.gpus)} ({p.keys})" for p in wanted)
    count = len(nodes)
    return (f"Ray cannot start this run's actor pools: {', and '.join(problems)}, where the cluster has "
            f"{_amount(have_cpu, have_gpu) if have_gpu else _amount(have_cpu, 0) + ' and no GPU'} in {count} "
            f"node{'' if count == 1 else 's'} ({pools_text}; a task: {slot:g} CPU, ray.parse / ray.chunk / ray.excel)")
