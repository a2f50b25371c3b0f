"""The runtime that computes a model's vectors: torch, ONNX Runtime or OpenVINO, float32 or int8 (#20).

All go through sentence-transformers' own backends (`SentenceTransformer(..., backend=...)`), so pooling
and normalisation are the model's own. ONNX and OpenVINO need the model exported to their format: the
export is made offline from the model's local files the first time a node needs it, and kept under
$CORPUSMILL_HOME/models/ (built in a temporary directory and renamed into place, so actors exporting
at once never load half a model; the loser of the race discards its copy).

int8 is ONNX Runtime's dynamic quantization (weights int8, activations quantized per batch): it needs
no calibration data, so it can be made offline. One quantization config per CPU family (avx2 on
x86-64, which runs on AVX-512 machines too; arm64), so every x86 node computes the same vectors.
OpenVINO's int8 needs calibration data (static quantization) and is not offered.

The backend and quantization are part of the model reference a collection records (`MODEL#onnx-int8`,
jobs/model_refs.py): their vectors differ from torch float32 (MiniLM int8: cosine 0.958 at the lowest
over 582 hugo windows; onnx and openvino float32: 1.000), so a collection never mixes them, and
`search` embeds queries the way its chunks were. Non-torch backends run on the CPU: they are what a
CPU-only run is offered in place of torch (speed and page hit@1 of each: `python -m ops.bench.backends`).
"""

from __future__ import annotations

import hashlib
import logging
import platform
import re
import shutil
import tempfile
import warnings
from pathlib import Path

from jobs.embed.models import join_ref, resolve_model, split_ref
from jobs.errors import NotAvailableError
from jobs.home import home

log = logging.getLogger(__name__)

# What each backend needs beyond sentence-transformers, as pip names it.
_EXTRAS = {"onnx": ("optimum.onnxruntime", "optimum-onnx[onnxruntime]"),
           "openvino": ("optimum.intel", "optimum-intel[openvino]")}


def quantization_family() -> str:
    """The ONNX Runtime dynamic-quantization config this node uses (module docstring)."""
    return "arm64" if platform.machine().lower() in ("aarch64", "arm64") else "avx2"


def check_backend(ref: str) -> None:
    """Fail early, with what to install, when `ref`'s backend cannot load here."""
    backend = split_ref(ref)[1]
    if backend not in _EXTRAS:
        return
    module, package = _EXTRAS[backend]
    try:
        __import__(module)
    except ImportError as exc:
        raise NotAvailableError(f"embedding backend {backend!r} needs {package} (pip install '{package}' or "
                                f"`pip install 'corpusmill[{backend}]'`): {exc}") from exc


def export_dir(ref: str) -> Path:
    """Where `ref`'s export lives on this node: one directory per model location, backend and quantization."""
    info = resolve_model(ref)
    model, backend, quantize = split_ref(ref)
    slug = re.sub(r"[^a-z0-9]+", "-", model.lower().rsplit("/", 1)[-1]).strip("-")
    digest = hashlib.sha256(info.location.encode()).hexdigest()[:10]
    kind = backend + ("" if quantize == "none" else f"-{quantize}-{quantization_family()}")
    return home() / "models" / f"{slug}-{digest}" / kind


def load_model(ref: str, device: str = "cpu", dtype: str = "float32", threads: int | None = None):
    """A SentenceTransformer computing `ref`'s vectors; exported first if its backend needs it. `threads`:
    the runtime's threads for one call (torch's are per process: the caller sets them)."""
    # Late: torch and sentence-transformers load in the encoding actor or the search process, never in a
    # driver that only names a stage.
    import torch
    from sentence_transformers import SentenceTransformer

    info = resolve_model(ref)
    backend = split_ref(ref)[1]
    if backend == "torch":
        model = SentenceTransformer(info.location, device=device)
        return model.to(getattr(torch, dtype)) if dtype != "float32" and device != "cpu" else model
    check_backend(ref)
    target = export_dir(ref)
    if not (target / "modules.json").is_file():
        _export(ref, target)
    kwargs = _file_kwargs(ref, target)
    if threads and backend == "onnx":
        import onnxruntime  # late: installed with the onnx extra only

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads  # else each encoder worker's session takes every core
        kwargs["session_options"] = options
    elif threads:
        kwargs["ov_config"] = {"INFERENCE_NUM_THREADS": str(threads)}
    return SentenceTransformer(str(target), device="cpu", backend=backend, model_kwargs=kwargs)


def _file_kwargs(ref: str, target: Path) -> dict:
    """The int8 file by name: sentence-transformers loads `onnx/model.onnx` unless told."""
    if split_ref(ref)[2] == "none":
        return {}
    found = sorted((target / "onnx").glob("model_*int8_*.onnx"))
    if not found:
        raise NotAvailableError(f"{target}: the int8 export holds no quantized model; remove the directory to export "
                                "it again")
    return {"file_name": str(found[0].relative_to(target))}


def _export(ref: str, target: Path) -> None:
    """Export `ref` into `target` (module docstring: temporary directory, then rename)."""
    from sentence_transformers import SentenceTransformer, export_dynamic_quantized_onnx_model  # late: see load_model

    info = resolve_model(ref)
    model_name, backend, quantize = split_ref(ref)
    if not Path(info.location).is_dir():
        raise NotAvailableError(f"{model_name}: no local files to export for the {backend} backend (resolved to "
                                f"{info.location!r}); load it once with the torch backend, or give a path")
    log.info("exporting %s for %s into %s (once per node)", model_name, join_ref(model_name, backend, quantize), target)
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    quiet = logging.getLogger("sentence_transformers")
    level = quiet.level
    try:
        # sentence-transformers advises saving the export into the model's own (package) directory, and
        # the tracer warns about constants: neither applies to an export kept here.
        quiet.setLevel(logging.ERROR)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = SentenceTransformer(info.location, device="cpu", backend=backend)
        model.save_pretrained(str(work))
        if quantize == "int8":
            export_dynamic_quantized_onnx_model(model, quantization_family(), str(work))
            for plain in (work / "onnx").glob("model.onnx"):
                plain.unlink()  # the int8 file is the one loaded; keeping both makes the loader ask which
        try:
            work.rename(target)
        except OSError:
            if not (target / "modules.json").is_file():  # not another actor's finished export: a real failure
                raise
    finally:
        quiet.setLevel(level)
        shutil.rmtree(work, ignore_errors=True)
