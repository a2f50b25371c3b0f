"""spaCy plugins a sentence pipeline needs that corpusmill installs only with an extra: en_core_web_trf's
`transformer` component is made by spacy-curated-transformers (3.7 and later; `curated_transformer`) or
spacy-transformers (earlier pipelines; `transformer`), both in the `gpu` extra (`pip install 'corpusmill[gpu]'`).

Without the plugin spaCy fails deep inside a sentence actor on Ray with E002 ("can't find factory"); the
driver checks first (`check_plugins`, from what the pipeline declares it requires), and a load that still
meets E002 says the same one line."""

from __future__ import annotations

import json
import re
from importlib import metadata, util
from pathlib import Path

from jobs.errors import MissingPackageError

# distribution -> (the module it installs, the factory it registers, the extra that brings it)
_PLUGINS = {"spacy-curated-transformers": ("spacy_curated_transformers", "curated_transformer", "gpu"),
            "spacy-transformers": ("spacy_transformers", "transformer", "gpu")}
_NO_FACTORY = re.compile(r"\[E002\] Can't find factory for '([^']+)'")


def _importable(module: str) -> bool:
    return util.find_spec(module) is not None


def _missing(pipeline: str, dist: str) -> MissingPackageError:
    extra = _PLUGINS[dist][2]
    return MissingPackageError(f"spaCy pipeline {pipeline!r} (sentences.model) needs {dist}, which is not installed: "
                               f"pip install 'corpusmill[{extra}]'")


def _requirements(pipeline: str) -> list[str]:
    """What the pipeline says it requires: an installed package's metadata, else a directory's meta.json."""
    try:
        return metadata.requires(pipeline) or []
    except (metadata.PackageNotFoundError, ValueError):
        pass
    try:
        return json.loads((Path(pipeline).expanduser() / "meta.json").read_text(encoding="utf-8")).get("requirements") or []
    except (OSError, ValueError, AttributeError):  # no meta.json, or not the JSON object spaCy writes
        return []


def check_plugins(pipeline: str) -> None:
    """Raise MissingPackageError, naming the extra, when `pipeline` requires a plugin that is not installed."""
    for requirement in _requirements(pipeline):
        name = re.match(r"[A-Za-z0-9._-]*", requirement).group(0)
        dist = re.sub(r"[-_.]+", "-", name).lower()
        if dist in _PLUGINS and not _importable(_PLUGINS[dist][0]):
            raise _missing(pipeline, dist)


def plugin_error(pipeline: str, exc: ValueError) -> MissingPackageError | None:
    """The one-line error for spacy.load's E002 when the factory it lacks is a plugin's that is not
    installed; None for any other error."""
    found = _NO_FACTORY.search(str(exc))
    for dist, (module, factory, _) in _PLUGINS.items():
        if found and found.group(1) == factory and not _importable(module):
            return _missing(pipeline, dist)
    return None
