"""How the embedding stage is laid out on a Ray cluster: how many encoder actors, how many encoder
workers each, and the arguments each actor builds its Embedder from. Shared by ingest and reembed;
plain arithmetic over the config and the cluster's resources (no Ray here)."""

from __future__ import annotations

from jobs.config import JobConfig, ResourcesConfig
from jobs.store.known_vectors import KnownVectors


def embed_layout(cfg: JobConfig, cluster: dict, cores: int, documents: int,
                 local: bool = True, others: float | None = None) -> tuple[int, int]:
    """(actors, encoder workers per actor) of the embedding stage, from `resources.pool_size` and
    `workers_per_actor` (either may be `auto`).

    On GPUs: one actor per `num_gpus` share of the GPUs the sentence actors leave, one worker each, within
    the CPUs they leave. On CPUs: one
    single-threaded encoder per `torch_threads` cores (several single-threaded encoders beat one
    multi-threaded one, whose threads stall at every sync point when Ray's other processes take a core;
    measured alone and beside CPU load), within the logical CPUs left once the sentence actors and one task slot for
    parse/chunk are placed, so the pipeline never waits for a slot that cannot free up. With
    `workers_per_actor: auto` on a `local` Ray those encoders are threads of one actor (one import of
    torch instead of one per core); on a multi-node cluster each actor has one worker, so actors fit
    beside the other stages wherever a node has a CPU free, also after a node is lost. An actor's
    workers share each batch, but never more actors than the run has batches (counting at least one
    chunk per document): an actor with nothing to do still pays its imports and model load."""
    emb, res = cfg.embedding, cfg.embedding.resources
    threads = emb.torch_threads or max(1, int(res.num_cpus))  # a Ray actor's torch runs one thread per CPU
    gpus = cluster.get("GPU", 0)
    if others is None:
        sentences = cfg.sentences.resources
        others = (sentences.pool_size or 1) * sentences.num_cpus + max(cfg.ray.parse.num_cpus, cfg.ray.chunk.num_cpus,
                                                                         cfg.ray.excel.num_cpus)
        # The sentence actors' GPU shares are placed too: encoders get what they leave, or some would never start.
        gpus -= (sentences.pool_size or 1) * sentences.num_gpus
    fits = int((cluster.get("CPU", 0) - others) // res.num_cpus)  # encoders that fit, each holding num_cpus
    on_gpu = bool(res.num_gpus)

    def auto_workers(encoders: int) -> int:
        return max(1, min(cores // threads, encoders)) if local and not on_gpu else 1

    batches = max(1, -(-documents // res.batch_size))
    if res.pool_size != "auto":
        actors = res.pool_size or 1
        per_actor = emb.workers_per_actor
        return actors, (auto_workers(max(1, fits // actors)) if per_actor == "auto" else per_actor)
    if on_gpu:  # the GPU shares left, within the CPUs left (each actor holds its num_cpus too)
        actors = max(1, min(int(gpus / res.num_gpus + 1e-9), batches, fits))
        return actors, (1 if emb.workers_per_actor == "auto" else emb.workers_per_actor)
    encoders = max(1, min(cores // threads, fits))
    per_actor = auto_workers(encoders) if emb.workers_per_actor == "auto" else min(emb.workers_per_actor, encoders)
    return max(1, min(encoders // per_actor, batches)), per_actor


def embed_resources(cfg: JobConfig, actors: int, workers: int) -> ResourcesConfig:
    """The embedding stage's resources: `actors` in the pool, each holding its workers' CPUs."""
    res = cfg.embedding.resources
    return res.model_copy(update={"pool_size": actors, "num_cpus": res.num_cpus * workers})


def embedder_args(cfg: JobConfig, workers: int, model: str | None = None, known: KnownVectors | None = None) -> dict:
    """What each embedding actor builds its Embedder from (jobs/embed/encoder.py); `model` overrides
    the config's (a re-embed); `known`: where to look up vectors of texts embedded before."""
    emb = cfg.embedding
    return {"model": model or emb.reference, "device": emb.device, "dtype": emb.dtype,
            "encode_batch_size": emb.encode_batch_size, "torch_threads": emb.torch_threads,
            "num_gpus": emb.resources.num_gpus, "workers": workers, "known": known}
