"""The embedding stage's layout on a cluster: actors and encoder workers from the config and the cluster's
resources (arithmetic only: no Ray, no model)."""

import pytest

from jobs.config import JobConfig
from jobs.embed.layout import embed_layout, embed_resources, embedder_args


def _pool_cfg(**embedding):
    return JobConfig.model_validate({"embedding": embedding})


def test_auto_embedding_layout_on_cpu_is_one_encoder_per_thread_group_within_free_slots():
    cfg = _pool_cfg(torch_threads=1, resources={"num_cpus": 1, "pool_size": "auto", "batch_size": 128})
    # This machine's shape: 2 cores, a local Ray with 4 logical CPUs (1 for spaCy, 0.5 for a task).
    assert embed_layout(cfg, {"CPU": 4}, cores=2, documents=992) == (2, 1)
    # More cores than free logical CPUs: the sentence actor and a task slot are kept free.
    assert embed_layout(cfg, {"CPU": 16}, cores=16, documents=10_000) == (14, 1)
    two_threads = _pool_cfg(torch_threads=2, resources={"num_cpus": 1, "pool_size": "auto", "batch_size": 128})
    assert embed_layout(two_threads, {"CPU": 16}, cores=16, documents=10_000) == (8, 1)
    # A handful of documents is one batch: a second actor would only load the model.
    assert embed_layout(cfg, {"CPU": 4}, cores=2, documents=30) == (1, 1)
    # Never zero, even when nothing seems to fit.
    assert embed_layout(cfg, {"CPU": 1}, cores=1, documents=992) == (1, 1)


def test_auto_workers_pack_the_encoders_of_a_node_into_one_actor():
    cfg = _pool_cfg(torch_threads=1, workers_per_actor="auto",
                    resources={"num_cpus": 1, "pool_size": "auto", "batch_size": 512})
    # This machine: both encoders are threads of one actor, even for a run of one batch.
    assert embed_layout(cfg, {"CPU": 4}, cores=2, documents=992) == (1, 2)
    assert embed_layout(cfg, {"CPU": 4}, cores=2, documents=30) == (1, 2)
    # A multi-node cluster: one worker per actor, so each fits wherever a node has a CPU free.
    assert embed_layout(cfg, {"CPU": 32}, cores=32, documents=100_000, local=False) == (30, 1)
    # A fixed local pool with auto workers: each actor takes its share of the free slots.
    fixed = _pool_cfg(torch_threads=1, workers_per_actor="auto", resources={"num_cpus": 1, "pool_size": 2})
    assert embed_layout(fixed, {"CPU": 16}, cores=16, documents=1000) == (2, 7)
    # On GPUs auto means one worker: the device, not the threads, is the limit.
    gpu = _pool_cfg(workers_per_actor="auto", resources={"num_gpus": 1, "pool_size": "auto", "batch_size": 2048})
    assert embed_layout(gpu, {"CPU": 64, "GPU": 4}, cores=64, documents=100_000) == (4, 1)


def test_workers_per_actor_must_be_positive():
    with pytest.raises(ValueError, match="workers_per_actor"):
        _pool_cfg(workers_per_actor=0)


def test_auto_embedding_pool_on_gpus_is_one_actor_per_gpu_share():
    cfg = _pool_cfg(resources={"num_cpus": 2, "num_gpus": 0.5, "pool_size": "auto", "batch_size": 2048})
    assert embed_layout(cfg, {"CPU": 64, "GPU": 4}, cores=64, documents=100_000) == (8, 1)
    assert embed_layout(cfg, {"CPU": 64, "GPU": 4}, cores=64, documents=3000) == (2, 1)
    fixed = _pool_cfg(resources={"num_gpus": 1, "pool_size": 3})
    assert embed_layout(fixed, {"CPU": 64, "GPU": 4}, cores=64, documents=5) == (3, 1)


def test_a_job_without_sentence_actors_gives_their_cpus_to_the_encoders():
    cfg = _pool_cfg(torch_threads=1, resources={"num_cpus": 1, "pool_size": "auto", "batch_size": 128})
    # A re-embed holds only its read tasks' slot besides the encoders: 15 of 16 logical CPUs, not 14.
    assert embed_layout(cfg, {"CPU": 16}, cores=16, documents=10_000, others=1) == (15, 1)
    assert embed_layout(cfg, {"CPU": 16}, cores=16, documents=10_000) == (14, 1)


def test_the_embed_stage_takes_its_workers_cpus_and_the_model_it_is_given():
    cfg = _pool_cfg(torch_threads=1, device="cpu", resources={"num_cpus": 1, "pool_size": "auto"})
    res = embed_resources(cfg, actors=3, workers=2)
    assert (res.pool_size, res.num_cpus) == (3, 2)
    assert embedder_args(cfg, 2)["model"] == cfg.embedding.model
    args = embedder_args(cfg, 2, model="other/model")
    assert (args["model"], args["workers"], args["device"], args["torch_threads"]) == ("other/model", 2, "cpu", 1)
