"""Walk the input roots and describe each file: relative path, type, size, listing tag, sha256.

Roots are local paths or object-store URIs (jobs/sources/uris.py), listed by jobs/sources/listing.py.
The listing streams, and so does discovery: pages of files, each looked up in the store and hashed
together (iter_discovered). A file whose listing (size and ETag, or mtime) still matches what the store
recorded for a `done` document keeps that document's sha256 without being read (and so does one
that failed on its content: jobs/sources/changes.py keeps it failed). Every other file is
read and hashed (object-store files several at a time), and the sha256 is what decides whether its
chunks are replaced.

Local roots: symbolic links are followed only inside the root (listing._iter_local); links passed over
(outside the root, loops, broken) are logged as warnings and returned on the result's `skipped`, from
where the plan, `corpusmill plan` and the QA report show them.

The include/exclude globs match without regard to case (`**/*.md` takes `NOTES.MD`, `**/drafts/**`
leaves out `Drafts/`), locally and in object stores alike.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from jobs.errors import ConfigError
from jobs.sources.globs import matches
from jobs.sources.listing import Listed, Skipped, iter_files
from jobs.sources.reads import sha256_of
from jobs.sources.storage import StorageOptions, locate
from jobs.sources.uris import is_remote, local_path

log = logging.getLogger(__name__)

# .csv rows go through the Excel path; .xls and .xlsb (in the default include globs) are taken only to be
# refused with a conversion hint (jobs/excel/guards.py): a run says which workbooks it could not read instead of passing
# them over in silence.
SOURCE_TYPES = {".md": "markdown", ".markdown": "markdown", ".xlsx": "excel", ".xlsm": "excel", ".csv": "excel",
                ".xls": "excel", ".xlsb": "excel"}
HASH_BATCH = 256  # listed files in a page: looked up in the store, then hashed together
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


def _included(rel: str, include: list[str]) -> bool:
    return matches(rel, include, ignore_case=True)


def _excluded(rel: str, exclude: list[str]) -> bool:
    return matches(rel, exclude, ignore_case=True)


def _trusted(doc, item: Listed) -> str | None:
    """The stored sha256 when the listing proves the content is the one the store holds (a `done`
    document's loaded content, or the content a `failed` one failed on), else None."""
    if doc is None or not item.tag:
        return None
    status = getattr(doc, "status", "done")
    # A pending row, or one that failed for a reason not its content's, may hold the listing of content
    # that never landed: read again.
    sha = doc.content_sha256 if status == "done" else getattr(doc, "failed_sha256", None) if status == "failed" else None
    if sha and doc.source_size == item.size and doc.source_etag == item.tag:
        return sha
    return None


def discover(roots: list, include: list[str], exclude: list[str], storage: StorageOptions | None = None,
             known: Mapping | None = None, *, follow_external_links: bool = False) -> Discovered:
    """Every matching file under `roots`, as one list (iter_discovered's pages joined). Two roots
    holding the same relative path is an error, since the relative path is the document's identity
    in the store.

    `known` (the store's documents by source path): see iter_discovered. Entries passed over are on
    the result's `skipped`."""
    skipped: list[dict] = []
    lookup = (lambda paths: known) if known is not None else None
    files = [f for page in iter_discovered(roots, include, exclude, storage, lookup, skipped,
                                           follow_external_links=follow_external_links) for f, _ in page]
    return Discovered(files, skipped)


def iter_discovered(roots: list, include: list[str], exclude: list[str], storage: StorageOptions | None = None,
                    lookup: Callable[[list[str]], Mapping] | None = None, skipped: list[dict] | None = None,
                    *, follow_external_links: bool = False, trust_listing: bool = True,
                    page_size: int | None = None) -> Iterator[list[tuple[SourceFile, object | None]]]:
    """Every matching file under `roots`, a page at a time: (SourceFile, what the store holds for it
    or None). Nothing of a page is kept once it is yielded, so a plan made from the pages holds only
    what it decides to keep (jobs/plan.py), not the corpus.

    `lookup(paths)`: the store's documents for a page of listed paths (objects with `status`,
    `content_sha256`, `source_size`, `source_etag`, like jobs.sources.changes.StoredDoc); a file
    whose listing matches a `done` one (or one that failed on its content) is not read unless
    `trust_listing` is off. Without it every file is read and hashed.

    `skipped` receives the entries passed over when they could have held a document: directories,
    and files the include globs select, that no exclude glob matches (a broken link under `.git/` is
    not worth a warning). `follow_external_links` (config input.follow_external_links): follow links
    whose target lies outside the root too."""
    if not roots:
        raise ConfigError("no input roots: pass --input DIR|URI or set input.roots in the config")
    skipped = skipped if skipped is not None else []
    # Relative paths seen, to refuse one listed under two roots. One root lists each path once, so
    # only several roots pay this set (a path's root index, for the message).
    found: dict[str, int] | None = {} if len(roots) > 1 else None
    counts = {"listed": 0, "files": 0, "hashed": 0}
    page_size = page_size or HASH_BATCH
    with ThreadPoolExecutor(max_workers=HASH_THREADS, thread_name_prefix="hash") as pool:
        def resolve(listed: list[tuple[Listed, str]]) -> list[tuple[SourceFile, object | None]]:
            stored = lookup([item.rel for item, _ in listed]) if lookup else {}
            out: list = [None] * len(listed)
            waiting = []
            for i, (item, source_type) in enumerate(listed):
                doc = stored.get(item.rel)
                sha = _trusted(doc, item) if trust_listing else None
                if sha is not None:
                    out[i] = (SourceFile(item.rel, item.uri, source_type, item.size, sha, item.tag, hashed=False), doc)
                else:
                    waiting.append((i, item, source_type, doc))
            shas = pool.map(lambda w: sha256_of(w[1].uri, storage, w[1].size), waiting)
            for (i, item, source_type, doc), sha in zip(waiting, shas):
                out[i] = (SourceFile(item.rel, item.uri, source_type, item.size, sha, item.tag, hashed=True), doc)
            counts["files"] += len(out)
            counts["hashed"] += len(waiting)
            return out

        for index, root in enumerate(roots):
            def on_skip(entry: Skipped, root=root) -> None:
                # Reported when it could have held a document: a directory, or a file the globs select
                # (a virtualenv's bin/python -> /usr/bin/python3 is not worth a warning).
                if _excluded(entry.rel, exclude) or not (entry.is_dir or _included(entry.rel, include)):
                    return
                skipped.append({"root": str(root), **entry.as_dict()})
                if len(skipped) <= LOGGED_SKIPS:
                    log.warning("discover: %s under %s passed over (%s -> %s)", entry.rel, root, entry.reason,
                                entry.target or "?")

            page: list[tuple[Listed, str]] = []
            for item in iter_files(str(root), storage, follow_external_links=follow_external_links,
                                   on_skip=on_skip):
                counts["listed"] += 1
                rel = item.rel
                if not _included(rel, include) or _excluded(rel, exclude):
                    continue
                source_type = SOURCE_TYPES.get(PurePosixPath(rel).suffix.lower())
                if source_type is None:
                    continue  # an include glob wider than what we can parse
                if found is not None:
                    if rel in found:
                        raise ConfigError(
                            f"{rel} exists under two input roots ({roots[found[rel]]} and {root}); "
                            "documents are identified by their path relative to the root, so give one root"
                        )
                    found[rel] = index
                page.append((item, source_type))
                if len(page) >= page_size:
                    yield resolve(page)
                    page = []
            if page:
                yield resolve(page)
    if len(skipped) > LOGGED_SKIPS:
        log.warning("discover: %d more entries passed over (every one is listed by `corpusmill plan --json`)",
                    len(skipped) - LOGGED_SKIPS)
    log.info("discover: %d listed, %d matched, %d read and hashed, %d unchanged by their listing, %d passed over",
             counts["listed"], counts["files"], counts["hashed"], counts["files"] - counts["hashed"], len(skipped))


def relocate(roots: list, rel: str, storage: StorageOptions | None = None) -> str | None:
    """Where `rel`, listed earlier in this run, is now: the local path (links resolved, as the listing
    gives it) or object URI under the first root that holds it; None when no root does. For the few
    unchanged files a plan must take back after it was made (jobs/ingest.py, _take_released), since
    the plan keeps no unchanged file."""
    for root in roots:
        if not is_remote(str(root)):
            path = local_path(str(root)) / rel
            if path.is_file():
                return os.path.realpath(path)
            continue
        loc = locate(str(root), storage)
        if len(roots) == 1 or loc.fs.exists(f"{loc.path}/{rel}"):
            return f"{loc.uri}/{rel}"
    return None
