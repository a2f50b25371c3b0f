"""Walk the input roots and describe each file: relative path, type, size, listing tag, sha256.

Roots are local paths or object-store URIs (jobs/sources/fs.py). The listing streams; a file whose
listing (size and ETag, or mtime) still matches what the store recorded for a `done` document keeps
that document's sha256 without being read. Every other file is read and hashed (object-store files
several at a time), and the sha256 is what decides whether its chunks are replaced.
"""

from __future__ import annotations

import hashlib
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Mapping

from jobs.sources import fs
from jobs.sources.globs import matches

log = logging.getLogger(__name__)

# .csv rows go through the Excel path; .xls is accepted only to be refused with a conversion hint.
SOURCE_TYPES = {".md": "markdown", ".markdown": "markdown", ".xlsx": "excel", ".xlsm": "excel", ".csv": "excel",
                ".xls": "excel"}
HASH_BATCH = 256  # listed files waiting to be hashed before they are hashed together
HASH_THREADS = 16  # concurrent object-store reads while hashing (I/O bound)


@dataclass(frozen=True)
class SourceFile:
    source_path: str  # relative to its input root, POSIX separators: the document's identity
    abs_path: str  # an absolute local path, or the object's URI (s3://bucket/key)
    source_type: str
    size_bytes: int
    content_sha256: str
    listing_tag: str | None = None  # `etag:…` / `mtime:…` from the listing (stored with the document)
    hashed: bool = True  # read and hashed now; False: the listing matched the store, its sha256 came from there


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def _trusted(known: Mapping | None, rel: str, item: fs.Listed) -> str | None:
    """The stored sha256 when the listing proves the content is the one the store holds, else None."""
    doc = known.get(rel) if known else None
    if doc is None or getattr(doc, "status", "done") != "done" or not item.tag:
        return None  # pending/failed rows may hold the listing of content that never landed
    if doc.source_size == item.size and doc.source_etag == item.tag and doc.content_sha256:
        return doc.content_sha256
    return None


def discover(roots: list, include: list[str], exclude: list[str], storage: fs.StorageOptions | None = None,
             known: Mapping | None = None) -> list[SourceFile]:
    """Every matching file under `roots`. Two roots holding the same relative path is an error,
    since the relative path is the document's identity in the store.

    `known`: the store's documents by source path (objects with `status`, `content_sha256`,
    `source_size`, `source_etag`, like jobs.sources.plan.StoredDoc); files whose listing matches a
    `done` one are not read. Without it every file is read and hashed."""
    if not roots:
        raise ValueError("no input roots: pass --input DIR|URI or set input.roots in the config")
    found: dict[str, int] = {}  # rel -> index in out
    out: list[SourceFile | None] = []
    waiting: list[tuple[int, fs.Listed, str]] = []
    listed = 0
    with ThreadPoolExecutor(max_workers=HASH_THREADS, thread_name_prefix="hash") as pool:
        def hash_waiting() -> None:
            shas = pool.map(lambda w: fs.sha256_of(w[1].uri, storage, w[1].size), waiting)
            for (i, item, source_type), sha in zip(waiting, shas):
                out[i] = SourceFile(item.rel, item.uri, source_type, item.size, sha, item.tag, hashed=True)
            waiting.clear()

        for root in roots:
            for item in fs.iter_files(str(root), storage):
                listed += 1
                rel = item.rel
                if not matches(rel, include) or matches(rel, exclude):
                    continue
                source_type = SOURCE_TYPES.get(PurePosixPath(rel).suffix.lower())
                if source_type is None:
                    continue  # an include glob wider than what we can parse
                if rel in found:
                    first = out[found[rel]] or next(w[1] for w in waiting if w[1].rel == rel)
                    first_uri = first.abs_path if isinstance(first, SourceFile) else first.uri
                    raise ValueError(
                        f"{rel} exists under two input roots ({first_uri} and {item.uri}); "
                        "documents are identified by their path relative to the root, so give one root"
                    )
                found[rel] = len(out)
                sha = _trusted(known, rel, item)
                if sha is not None:
                    out.append(SourceFile(rel, item.uri, source_type, item.size, sha, item.tag, hashed=False))
                    continue
                out.append(None)
                waiting.append((found[rel], item, source_type))
                if len(waiting) >= HASH_BATCH:
                    hash_waiting()
        hash_waiting()
    files = [f for f in out if f is not None]
    hashed = sum(f.hashed for f in files)
    log.info("discover: %d listed, %d matched, %d read and hashed, %d unchanged by their listing",
             listed, len(files), hashed, len(files) - hashed)
    return files
