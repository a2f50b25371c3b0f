"""Embedding backends on the packaged model (jobs/embed/backends.py): torch, ONNX Runtime (float32 and
int8) and OpenVINO each compute the model's vectors; the backend is part of the model reference."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from jobs.config import EmbeddingConfig
from jobs.embed import backends
from jobs.embed.backends import check_backend, export_dir, load_model
from jobs.embed.encoder import Embedder
from jobs.errors import NotAvailableError

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
TEXTS = ["How do I install Hugo on Linux?", "Front matter holds the title and date of a page.",
         "The server rebuilds the site when a file changes.", "Which team won 13 Stanley Cups?",
         "Taxonomies group content by tags and categories. " * 12]


def test_the_config_composes_the_reference_and_refuses_what_cannot_be_built():
    assert EmbeddingConfig(model=MODEL, backend="onnx", quantize="int8").reference == MODEL + "#onnx-int8"
    assert EmbeddingConfig(model=MODEL, backend="openvino").reference == MODEL + "#openvino"
    assert EmbeddingConfig(model=MODEL).reference == MODEL
    with pytest.raises(ValueError, match="needs backend onnx"):
        EmbeddingConfig(model=MODEL, backend="openvino", quantize="int8")
    with pytest.raises(ValueError, match="embedding.backend"):
        EmbeddingConfig(model=MODEL + "#onnx")


def test_a_missing_runtime_is_named_with_what_to_install(monkeypatch):
    monkeypatch.setitem(backends._EXTRAS, "openvino", ("corpusmill_no_such_module", "optimum-intel[openvino]"))
    with pytest.raises(NotAvailableError, match=r"optimum-intel\[openvino\]"):
        check_backend(MODEL + "#openvino")
    check_backend(MODEL)  # torch needs nothing more


@pytest.fixture(scope="module")
def torch_vectors():
    return Embedder(MODEL, device="cpu").encode(TEXTS)


@pytest.mark.parametrize("suffix, module, floor", [("#onnx", "optimum.onnxruntime", 0.9999),
                                                   ("#onnx-int8", "optimum.onnxruntime", 0.95),
                                                   ("#openvino", "optimum.intel", 0.9999)])
def test_each_backend_computes_the_models_vectors(suffix, module, floor, torch_vectors):
    if importlib.util.find_spec(module.split(".")[0]) is None or importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed here (pip install 'corpusmill[{suffix[1:].split('-')[0]}]')")
    ref = MODEL + suffix
    embedder = Embedder(ref, device="auto", workers=2, torch_threads=1)
    vectors = embedder.encode(TEXTS)
    assert embedder.device == "cpu" and vectors.shape == torch_vectors.shape and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    cosine = (vectors * torch_vectors).sum(axis=1)
    assert cosine.min() >= floor, cosine
    if "int8" in suffix:
        assert cosine.min() < 0.9999, "int8 vectors equal float32 ones: the quantized model was not loaded"
    assert (np.argmax(vectors @ torch_vectors.T, axis=1) == np.arange(len(TEXTS))).all()
    rows = embedder([{"doc_id": "a", "row_kind": "chunk", "omitted": False, "embed_text": TEXTS[0]}])
    assert rows[0]["embedding_model"] == ref  # what the collection records
    # The node's export is made once and reused; nothing half-built is left beside it.
    target = export_dir(ref)
    stamp = (target / "modules.json").stat().st_mtime_ns
    load_model(ref)
    assert (target / "modules.json").stat().st_mtime_ns == stamp
    assert not [p.name for p in target.parent.iterdir() if p.name.startswith(".")]


@pytest.mark.slow
def test_an_int8_collection_is_searched_as_it_was_embedded_and_keeps_its_backend(tmp_path, corpus, pg_url):
    from tests.conftest import write_config  # late: tests.test_ingest is a module of slow end-to-end tests
    from tests.test_ingest import cli, status

    if importlib.util.find_spec("optimum") is None or importlib.util.find_spec("optimum.onnxruntime") is None:
        pytest.skip("optimum.onnxruntime is not installed here (pip install 'corpusmill[onnx]')")
    int8 = write_config(tmp_path / "int8.yaml", "e2e_int8", [corpus], embedding__backend="onnx",
                        embedding__quantize="int8")
    out = cli("ingest", "--config", str(int8))  # 7 documents: in process
    assert out.returncode == 0, out.stdout + out.stderr
    assert status("e2e_int8")["embedding_model"] == MODEL + "#onnx-int8"
    q = cli("search", "--collection", "e2e_int8", "--json", "-k", "2", "--config", str(int8),
            "How do I define redirects for the development server?")
    assert q.returncode == 0, q.stderr
    assert 'hugo/server.md"' in q.stdout
    # A torch config would mix float32 vectors into an int8 collection: refused, naming both.
    torch_cfg = write_config(tmp_path / "torch.yaml", "e2e_int8", [corpus])
    refused = cli("ingest", "--config", str(torch_cfg))
    assert refused.returncode == 2 and "#onnx-int8" in refused.stderr, refused.stdout + refused.stderr
