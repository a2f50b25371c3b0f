"""The syntax of an embedding model reference: `MODEL`, or `MODEL#backend[-int8]` (#20).

What a collection records as its embedding model names the runtime that computed its vectors too,
because their vectors differ (jobs/embed/backends.py). Here, at the bottom of the package, because the
config composes a reference from its keys and the embedding package resolves one.
"""

from __future__ import annotations

from pathlib import Path

BACKENDS = ("torch", "onnx", "openvino")
QUANTIZATIONS = ("none", "int8")


def split_ref(ref: str) -> tuple[str, str, str]:
    """(model, backend, quantize) of a reference: `MODEL`, `MODEL#onnx`, `MODEL#onnx-int8`, `MODEL#openvino`."""
    model, sep, suffix = ref.rpartition("#")
    if not sep or Path(ref).expanduser().is_dir():  # a directory whose name holds a '#' is a plain path
        return ref, "torch", "none"
    backend, _, quantize = suffix.partition("-")
    if backend not in BACKENDS or (quantize or "none") not in QUANTIZATIONS or not model:
        raise ValueError(f"{ref!r}: after '#' a model reference names its backend ({', '.join(BACKENDS)}), "
                         "optionally with -int8, e.g. all-MiniLM-L6-v2#onnx-int8")
    return model, backend, quantize or "none"


def join_ref(model: str, backend: str = "torch", quantize: str = "none") -> str:
    """The reference for `model` on `backend`: torch float32 has no suffix, so references made before
    backends existed stay what they were."""
    if backend == "torch" and quantize == "none":
        return model
    return f"{model}#{backend}" + ("" if quantize == "none" else f"-{quantize}")
