import huggingface_hub
import numpy as np
import pytest

from jobs.embed.encoder import Embedder, pick_device
from jobs.embed.models import resolve_model

MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def test_packaged_model_resolves_offline():
    info = resolve_model(MODEL)
    assert info.dimension == 384 and info.max_seq_length == 256
    assert info.location.endswith("model")


def test_a_model_not_here_falls_back_to_the_hub_id_when_the_hub_serves_it(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub, "model_info", lambda model, timeout: object())
    info = resolve_model("acme/served-by-the-hub")
    assert info.location == "acme/served-by-the-hub" and info.dimension is None


def test_cuda_requested_without_gpu_is_a_clear_error():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(RuntimeError, match="no GPU"):
        pick_device("cuda", 1)
    assert pick_device("auto", 1) == "cpu"


@pytest.fixture(scope="module")
def embedder():
    return Embedder(MODEL, device="cpu", encode_batch_size=8)


def test_embeds_only_chunks_that_are_not_omitted(embedder):
    rows = [
        {"doc_id": "a", "row_kind": "chunk", "omitted": False, "embed_text": "Guide › Install\n\nRun the installer."},
        {"doc_id": "a", "row_kind": "chunk", "omitted": True, "embed_text": "x"},
        {"doc_id": "b", "row_kind": "error", "error_stage": "parse_markdown"},
    ]
    out = embedder(rows)
    v = np.asarray(out[0]["embedding"], dtype=np.float32)
    assert v.shape == (384,) and abs(np.linalg.norm(v) - 1) < 1e-4
    assert out[0]["embedding_model"] == MODEL
    assert out[1].get("embedding") is None and out[2].get("embedding") is None


def test_similar_texts_are_closer(embedder):
    a, b, c = embedder.encode(["How to start the dev server", "Starting the development server", "Stanley Cup winners"])
    assert a @ b > a @ c


def test_workers_share_a_call_and_concurrent_calls_without_changing_a_vector(embedder):
    """Two encoder workers in one actor (each its own model copy) split every call's length-grouped
    batches, and Ray runs two calls at once: the vectors must be the one-worker vectors, in order."""
    from concurrent.futures import ThreadPoolExecutor

    texts = [f"Section {i} › Setup\n\n" + "Install the package and restart the server. " * (1 + i % 9)
             for i in range(48)]
    pooled = Embedder(MODEL, device="cpu", encode_batch_size=8, workers=2, max_batch_tokens=256)
    assert pooled.workers == 2
    alone = embedder.encode(texts)
    with ThreadPoolExecutor(2) as calls:
        first, second = calls.map(pooled.encode, [texts, texts[::-1]])
    np.testing.assert_allclose(first, alone, atol=1e-6)
    np.testing.assert_allclose(second, alone[::-1], atol=1e-6)


def test_token_lengths_count_special_tokens_and_stop_at_the_model_limit(embedder):
    short, long = embedder.token_lengths(["Run the installer.", "word " * 1000])
    assert short == len(embedder.model.tokenizer("Run the installer.")["input_ids"])
    assert long == embedder.model.max_seq_length


def test_known_texts_reuse_their_vectors_and_a_repeated_text_is_encoded_once(store, pg_url):
    import json

    from jobs.store.datasink import ChunkDatasink
    from jobs.store.known_vectors import KnownVectors
    from tests.store.test_datasink import _rows, _table, _task

    held = _rows("held", 1, "enc_reuse")
    held[0]["embedding"] = np.eye(384, dtype=np.float32)[7]  # not what MiniLM gives: a reused vector shows
    held[0]["embed_text"] = "Guide › Install\n\nRun the installer."
    coll = store.ensure_collection("enc_reuse", "m", 384)
    ChunkDatasink(pg_url, "corpusmill", coll, "w1", label="test enc_reuse").write([_table(held)], _task(0))
    reusing = Embedder(MODEL, device="cpu", encode_batch_size=8, known=KnownVectors(pg_url, "corpusmill", coll.chunk_table))
    new = "Guide › Upgrade\n\nRun the upgrader."
    rows = [{"doc_id": "a", "row_kind": "chunk", "omitted": False, "embed_text": held[0]["embed_text"], "doc_stats": "{}"},
            {"doc_id": "a", "row_kind": "chunk", "omitted": False, "embed_text": new},
            {"doc_id": "b", "row_kind": "chunk", "omitted": False, "embed_text": new}]
    out = reusing(rows)
    assert out[0]["embedding"] == [0.0] * 7 + [1.0] + [0.0] * 376  # from the collection, not computed
    assert out[1]["embedding"] == out[2]["embedding"] and out[1]["embedding"] != out[0]["embedding"]
    assert json.loads(out[0]["doc_stats"]) == {"vectors_reused": 1}  # a's known text
    assert json.loads(out[2]["doc_stats"]) == {"vectors_reused": 1}  # b's repeat of a's new text
    assert out[1].get("doc_stats") is None


def test_an_encoder_fault_fails_its_documents_and_a_bug_raises(embedder, monkeypatch):
    rows = [{"doc_id": "a", "row_kind": "chunk", "omitted": False, "embed_text": "one"},
            {"doc_id": "b", "row_kind": "chunk", "omitted": False, "embed_text": "two"}]

    def out_of_memory(texts):
        raise RuntimeError("CUDA out of memory")  # the machine's fault on this batch: its documents fail, retried

    monkeypatch.setattr(embedder, "encode", out_of_memory)
    assert [(r["row_kind"], r["error_class"]) for r in embedder([dict(r) for r in rows])] == [
        ("error", "RuntimeError"), ("error", "RuntimeError")]

    def buggy(texts):
        return texts.shape  # AttributeError: a bug, which stops the run instead of failing the documents

    monkeypatch.setattr(embedder, "encode", buggy)
    with pytest.raises(AttributeError):
        embedder([dict(r) for r in rows])
