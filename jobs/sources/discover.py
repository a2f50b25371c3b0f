"""Walk the input roots and describe each file: relative path, type, size, listing tag, sha256.

Roots are local paths or object-store URIs (jobs/sources/uris.py), listed by jobs/sources/listing.py.
The listing streams; a file whose listing (size and ETag, or mtime) still matches what the store
recorded for a `done` document keeps that document's sha256 without being read. Every other file is
read and hashed (object-store files several at a time), and the sha256 is what decides whether its
chunks are replaced.

Local roots: symbolic links are followed only inside the root (listing._iter_local); links passed over
(outside the root, loops, broken) are logged as warnings and returned on the result's `skipped`, from
where the plan, `corpusmill plan` and the QA report show them.
"""

from __future__ import annotations

import hashlib
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Mapping

from jobs.errors import ConfigError
from jobs.sources.globs import matches
from jobs.sources.listing import Listed, Skipped, iter_files
from jobs.sources.reads import sha256_of
from jobs.sources.storage import StorageOptions

log = logging.getLogger(__name__)

# .csv rows go through the Excel path; .xls is accepted only to be refused with a conversion hint.
SOURCE_TYPES = {".md": "markdown", ".markdown": "markdown", ".xlsx": "excel", ".xlsm": "excel", ".csv": "excel",
                ".xls": "excel"}
HASH_BATCH = 256  # listed files waiting to be hashed before they are hashed together
HASH_THREADS = 16  # concurrent object-store reads while hashing (I/O bound)
LOGGED_SKIPS = 50  # warnings for entries passed over, one each up to this many, then a count


@dataclass(frozen=True)
class SourceFile:
    source_path: str  # relative to its input root, POSIX separators: the document's identity
    abs_path: str  # an absolute local path, or the object's URI (s3://bucket/key)
    source_type: str
    size_bytes: int
    content_sha256: str
    listing_tag: str | None = None  # `etag:…` / `mtime:…` from the listing (stored with the document)
    hashed: bool = True  # read and hashed now; False: the listing matched the store, its sha256 came from there


class Discovered(list):
    """discover()'s result: the SourceFiles, a plain list to every caller, plus `skipped`: the local
    entries the listing passed over ({"root", "path", "reason", "target"}), for the plan to carry.
    A list subclass rather than a new return type, so existing callers keep working unchanged."""

    def __init__(self, files=(), skipped: list[dict] | None = None):
        super().__init__(files)
        self.skipped: list[dict] = list(skipped or [])


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def _trusted(known: Mapping | None, rel: str, item: Listed) -> str | None:
    """The stored sha256 when the listing proves the content is the one the store holds, else None."""
    doc = known.get(rel) if known else None
    if doc is None or getattr(doc, "status", "done") != "done" or not item.tag:
        return None  # pending/failed rows may hold the listing of content that never landed
    if doc.source_size == item.size and doc.source_etag == item.tag and doc.content_sha256:
        return doc.content_sha256
    return None


def discover(roots: list, include: list[str], exclude: list[str], storage: StorageOptions | None = None,
             known: Mapping | None = None, *, follow_external_links: bool = False) -> Discovered:
    """Every matching file under `roots`. Two roots holding the same relative path is an error,
    since the relative path is the document's identity in the store.

    `known`: the store's documents by source path (objects with `status`, `content_sha256`,
    `source_size`, `source_etag`, like jobs.sources.changes.StoredDoc); files whose listing matches a
    `done` one are not read. Without it every file is read and hashed.

    `follow_external_links` (config input.follow_external_links): follow links whose target lies
    outside the root too. Entries passed over are on the result's `skipped` when they could have
    held a document: directories, and files the include globs select, that no exclude glob matches
    (a broken link under `.git/` is not worth a warning)."""
    if not roots:
        raise ConfigError("no input roots: pass --input DIR|URI or set input.roots in the config")
    found: dict[str, int] = {}  # rel -> index in out
    out: list[SourceFile | None] = []
    waiting: list[tuple[int, Listed, str]] = []
    skipped: list[dict] = []
    listed = 0
    with ThreadPoolExecutor(max_workers=HASH_THREADS, thread_name_prefix="hash") as pool:
        def hash_waiting() -> None:
            shas = pool.map(lambda w: sha256_of(w[1].uri, storage, w[1].size), waiting)
            for (i, item, source_type), sha in zip(waiting, shas):
                out[i] = SourceFile(item.rel, item.uri, source_type, item.size, sha, item.tag, hashed=True)
            waiting.clear()

        for root in roots:
            def on_skip(entry: Skipped, root=root) -> None:
                # Reported when it could have held a document: a directory, or a file the globs select
                # (a virtualenv's bin/python -> /usr/bin/python3 is not worth a warning).
                if matches(entry.rel, exclude) or not (entry.is_dir or matches(entry.rel, include)):
                    return
                skipped.append({"root": str(root), **entry.as_dict()})
                if len(skipped) <= LOGGED_SKIPS:
                    log.warning("discover: %s under %s passed over (%s -> %s)", entry.rel, root, entry.reason,
                                entry.target or "?")

            for item in iter_files(str(root), storage, follow_external_links=follow_external_links,
                                      on_skip=on_skip):
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
                    raise ConfigError(
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
    if len(skipped) > LOGGED_SKIPS:
        log.warning("discover: %d more entries passed over (every one is listed by `corpusmill plan --json`)",
                    len(skipped) - LOGGED_SKIPS)
    log.info("discover: %d listed, %d matched, %d read and hashed, %d unchanged by their listing, %d passed over",
             listed, len(files), hashed, len(files) - hashed, len(skipped))
    return Discovered(files, skipped)
