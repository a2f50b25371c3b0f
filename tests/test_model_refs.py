"""A model reference names its backend (jobs/model_refs.py); resolving one finds the model's own files, or
says in one error where it looked and which models are here."""

from __future__ import annotations

import huggingface_hub  # imported now: it reads HF_HUB_OFFLINE once, and tests here set it
import pytest
import requests

from jobs.embed.models import resolve_model
from jobs.errors import NotFoundError
from jobs.model_refs import join_ref, split_ref

MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def test_a_reference_names_its_backend(tmp_path):
    assert split_ref(MODEL) == (MODEL, "torch", "none")
    assert split_ref(MODEL + "#onnx-int8") == (MODEL, "onnx", "int8")
    assert split_ref(MODEL + "#torch") == (MODEL, "torch", "none")
    assert join_ref(MODEL, "torch", "none") == MODEL  # collections from before backends keep their identity
    for ref in (MODEL, MODEL + "#onnx", MODEL + "#onnx-int8", MODEL + "#openvino"):
        assert join_ref(*split_ref(ref)) == ref
    for bad in (MODEL + "#tensorrt", MODEL + "#onnx-int4", "#onnx"):
        with pytest.raises(ValueError, match="names its backend"):
            split_ref(bad)
    odd = tmp_path / "models#v2"
    odd.mkdir()
    assert split_ref(str(odd)) == (str(odd), "torch", "none")  # a directory named so is a path
    assert resolve_model(MODEL + "#onnx-int8").location == resolve_model(MODEL).location
    assert resolve_model(MODEL + "#onnx-int8").dimension == 384


def test_a_model_that_is_not_here_while_offline_is_one_error_naming_where_it_looked(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub, "model_info", lambda *a, **k: pytest.fail("the hub was asked"))
    with pytest.raises(NotFoundError) as err:
        resolve_model("acme/offline-model")
    message = str(err.value)
    assert "'acme/offline-model' not found" in message and "HF_HUB_OFFLINE is set" in message
    assert f"Hugging Face cache {huggingface_hub.constants.HF_HUB_CACHE}" in message
    assert f"Models here: {MODEL}" in message  # the packaged model, as users write it
    assert "\n" not in message


def test_a_model_the_hub_cannot_serve_is_asked_for_once(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    asked = []

    def unreachable(model, timeout):
        asked.append((model, timeout))
        raise requests.ConnectionError("Failed to resolve 'huggingface.co'")

    monkeypatch.setattr(huggingface_hub, "model_info", unreachable)
    with pytest.raises(NotFoundError, match="huggingface.co could not be reached") as err:
        resolve_model("acme/unreachable-model#onnx")
    assert [m for m, _ in asked] == ["acme/unreachable-model"]  # one question, no retries
    assert "hf download acme/unreachable-model" in str(err.value)


def test_a_path_that_does_not_exist_is_not_looked_up_on_the_hub(tmp_path, monkeypatch):
    monkeypatch.setattr(huggingface_hub, "model_info", lambda *a, **k: pytest.fail("the hub was asked"))
    with pytest.raises(NotFoundError, match=f"no directory '{tmp_path / 'gone'}'.*it is no hub id"):
        resolve_model(str(tmp_path / "gone"))
