"""configs/gpu.yaml's actor pools on one GPU node (arithmetic only: no Ray, no GPU): more sentence actors than
encoders share the GPU, their shares fit on it, and the CPUs left leave room for parse and chunk."""

from jobs.config import load_config
from jobs.embed.layout import embed_layout
from tests.conftest import REPO

GPU_NODE = {"CPU": 16, "GPU": 1}  # one H200 and 16 cores: the machine the pool sizes were measured on


def test_gpu_yaml_puts_more_sentence_actors_than_encoders_on_a_gpu_and_both_fit():
    cfg = load_config(REPO / "configs" / "gpu.yaml")
    sentences, embedding = cfg.sentences.resources, cfg.embedding.resources
    actors, workers = embed_layout(cfg, GPU_NODE, cores=16, documents=100_000)
    assert (actors, workers) == (2, 1)
    assert sentences.pool_size > actors
    assert sentences.pool_size * sentences.num_gpus + actors * embedding.num_gpus <= GPU_NODE["GPU"]
    cpus = sentences.pool_size * sentences.num_cpus + actors * embedding.num_cpus
    assert cpus + max(cfg.ray.parse.num_cpus, cfg.ray.chunk.num_cpus) <= GPU_NODE["CPU"]


def test_auto_encoders_get_the_gpu_share_the_sentence_actors_leave():
    cfg = load_config(REPO / "configs" / "gpu.yaml")
    whole = cfg.model_copy(update={"sentences": cfg.sentences.model_copy(update={
        "resources": cfg.sentences.resources.model_copy(update={"num_gpus": 0})})})
    # Sentence actors on the CPUs: the encoders take every share of the GPU; on the GPU, what is left.
    assert embed_layout(whole, GPU_NODE, cores=16, documents=100_000)[0] == int(1 / cfg.embedding.resources.num_gpus)
    left = 4 - cfg.sentences.resources.pool_size * cfg.sentences.resources.num_gpus
    assert embed_layout(cfg, {"CPU": 64, "GPU": 4}, cores=64, documents=100_000)[0] == int(
        left / cfg.embedding.resources.num_gpus)
