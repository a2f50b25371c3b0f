"""Frozen corpora: a manifest (relative path, sha256, size) that pins exactly which files a run reads.

`corpusmill freeze DIR --tag NAME` writes one; `ingest`/`plan --manifest FILE` then process exactly
that snapshot. A listed file whose content changed since the freeze, or that disappeared, is
reported and left out; it is never silently read in its new state. Files not in the manifest are
ignored, so deletions are planned only for documents the manifest no longer lists.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from jobs.errors import ConfigError
from jobs.sources.discover import Discovered, SourceFile, discover
from jobs.sources.storage import StorageOptions
from jobs.sources.uris import normalize_root


@dataclass
class Snapshot:
    files: list[SourceFile]  # listed and unchanged: what the run reads (a Discovered: it carries `skipped`)
    changed: list[str] = field(default_factory=list)  # listed, but the content differs now
    missing: list[str] = field(default_factory=list)  # listed, but gone
    hashed: int = 0  # files read and hashed to take it (changed ones and those left out too)


def freeze(roots: list, include: list[str], exclude: list[str], tag: str, out: Path,
           storage: StorageOptions | None = None, *, follow_external_links: bool = False) -> dict:
    files = discover(roots, include, exclude, storage, follow_external_links=follow_external_links)
    manifest = {
        "tag": tag,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "roots": [normalize_root(r) for r in roots],
        "files": [{"source_path": f.source_path, "sha256": f.content_sha256, "size": f.size_bytes} for f in files],
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return manifest


def load_manifest(path: Path) -> dict:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read manifest {path}: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("files"), list) or not data.get("roots"):
        raise ConfigError(f"{path} is not a corpusmill manifest (expected 'roots' and 'files'; see `corpusmill freeze`)")
    return data


def roots_of(roots: list, manifest: Path | None) -> list:
    """The roots a run reads: those given (config or --input), else the manifest's own."""
    if roots or manifest is None:
        return list(roots)
    return list(load_manifest(manifest)["roots"])


def snapshot(manifest: dict, roots: list, include: list[str], exclude: list[str],
             storage: StorageOptions | None = None, known: dict | None = None, *,
             follow_external_links: bool = False) -> Snapshot:
    """The files of `manifest` as they are now under `roots`, split into unchanged, changed and missing.
    `known` (the store's documents) lets unchanged listings skip the read, as in a plain plan. A
    manifest entry that is now a link out of the root is `missing`: the link is never followed."""
    found = discover(roots, include, exclude, storage, known, follow_external_links=follow_external_links)
    current = {f.source_path: f for f in found}
    # What discovery passed over travels on `files`, so make_plan(snap.files, …) carries it to the plan.
    snap = Snapshot(files=Discovered(skipped=found.skipped), hashed=sum(f.hashed for f in found))
    for entry in manifest["files"]:
        f = current.get(entry["source_path"])
        if f is None:
            snap.missing.append(entry["source_path"])
        elif f.content_sha256 != entry["sha256"]:
            snap.changed.append(entry["source_path"])
        else:
            snap.files.append(f)
    return snap
