"""A model reference names its backend (jobs/model_refs.py); resolving one finds the model's own files."""

from __future__ import annotations

import pytest

from jobs.embed.models import resolve_model
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
