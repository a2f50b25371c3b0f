"""Listing a root: local directories and object-store prefixes, one entry at a time.

Listing streams: `iter_files` yields one object at a time from the store's pages (S3: 1,000 keys per
ListObjectsV2 page), holding no bodies, so the caller decides what to keep. Each entry carries the
size and a listing tag (`etag:…` where the store gives an ETag, else `mtime:…`) that discovery compares
with what the store recorded, so unchanged objects are never downloaded to be hashed.

Local listings follow symbolic links only where they stay inside the input root (unless
`follow_external_links`): a link to /etc/passwd placed in a corpus must not make the file's text
searchable. A directory that leads back to one of its own ancestors (a link loop) is not entered
again, and broken links are passed over; every entry passed over is reported as a `Skipped`.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from jobs.errors import NotFoundError
from jobs.sources.storage import Location, StorageOptions, locate
from jobs.sources.uris import is_remote, local_path

PAGE = 1000  # objects fetched per listing round trip (S3's own page size)


@dataclass(frozen=True)
class Listed:
    rel: str  # path relative to the root, POSIX separators
    uri: str  # absolute local path, or the object's URI
    size: int
    tag: str | None  # `etag:…` or `mtime:…`; None: the listing says nothing, so the content must be hashed


def listing_tag(info: dict) -> str | None:
    """What a listing says about an object's version: its ETag when the store gives one, else its mtime."""
    for key in ("ETag", "etag", "md5Hash", "content_md5"):
        value = info.get(key)
        if value:
            return "etag:" + (value.hex() if isinstance(value, (bytes, bytearray)) else str(value)).strip('"')
    for key in ("LastModified", "last_modified", "mtime", "updated", "modified"):
        value = info.get(key)
        if value:
            return "mtime:" + (value.isoformat() if isinstance(value, datetime) else str(value))
    return None


@dataclass(frozen=True)
class Skipped:
    """A local directory entry the listing did not follow, and why."""

    rel: str  # path relative to the root, POSIX separators
    reason: str  # one of SKIP_REASONS
    target: str  # where the link leads (resolved), or what it says when it leads nowhere
    is_dir: bool = False  # it leads to a directory: what it holds is unknown, whatever its own name

    def as_dict(self) -> dict:
        return {"path": self.rel, "reason": self.reason, "target": self.target}


SKIP_REASONS = {
    "link_outside_root": "a symbolic link whose target lies outside the input root (input.follow_external_links "
                         "follows it)",
    "link_loop": "a directory that leads back to one of its own ancestors, or a link that resolves to itself",
    "broken_link": "a symbolic link whose target does not exist or cannot be reached",
    "not_a_file": "a FIFO, socket or device: reading it could block the listing or never end",
    "link_duplicate": "a link to a directory already walked through another link: walked once, so that links "
                      "fanning out over the same directories cannot multiply the listing",
    "unreadable": "a directory the listing could not open (permissions, I/O): the documents stored from under it "
                  "are kept, not deleted",
}


def iter_files(root: str | os.PathLike, storage: StorageOptions | None = None, *,
               follow_external_links: bool = False,
               on_skip: Callable[[Skipped], None] | None = None) -> Iterator[Listed]:
    """Every file under `root`, one at a time, in a stable order (sorted locally, key order on S3).
    Nothing is read but the listing. A root that is missing (or, in an object store, empty) raises
    FileNotFoundError: a typo in a prefix must not plan the deletion of a whole collection.

    Local roots (`file://` ones included): see `_iter_local` for links; each entry passed over goes
    to `on_skip`. Object stores have no links."""
    if not is_remote(root):
        yield from _iter_local(local_path(root), follow_external_links, on_skip)
        return
    loc = locate(root, storage)
    count = 0
    entries = _iter_s3(loc) if loc.protocol == "s3" else _iter_walk(loc)
    for rel, info in entries:
        count += 1
        yield Listed(rel, f"{loc.uri}/{rel}", int(info.get("size") or 0), listing_tag(info))
    if count == 0:
        raise NotFoundError(f"input root has no objects: {loc.uri} (check the bucket and prefix)")


def _inside(path: str, real_root: str) -> bool:
    return path == real_root or path.startswith(real_root.rstrip(os.sep) + os.sep)


def _iter_local(root: Path, follow_external_links: bool = False,
                on_skip: Callable[[Skipped], None] | None = None) -> Iterator[Listed]:
    """A depth-first walk in os.walk's order (a directory's files, then its subdirectories, by name).

    Links: a link (to a file or a directory) whose resolved target lies inside the root is followed,
    and what it leads to is listed under the link's own path: the relative path is a document's
    identity, so a file linked into two places is two documents (see discover). A target outside the
    root is passed over (`link_outside_root`) unless `follow_external_links`. A directory whose
    (st_dev, st_ino) is already on the path from the root down to it is a loop and is not entered
    (`link_loop`), so the walk ends even where links point back up; a directory linked from several
    places is walked under its own path and through the first link to it (in walk order); further links
to it are `link_duplicate`, so links fanning out over the same directories cannot multiply the
listing. A directory that cannot be opened is `unreadable`. Links that
    resolve nowhere are `broken_link`. Listed.uri is the resolved path: what is hashed and read is the
    file the check approved, not whatever the link is changed to point at later (and a changed
    target fails the sha256 check in work_bytes)."""
    if not root.is_dir():
        raise NotFoundError(f"input root is not a directory: {root} (the config's input.roots, or --input; a "
                            "relative path is taken from the current directory)")
    real_root = os.path.realpath(root)
    skip = on_skip or (lambda _s: None)
    top = os.stat(root)
    # (directory as walked, its relative path, the (st_dev, st_ino) of it and of every directory above it)
    stack: list[tuple[str, str, tuple[tuple[int, int], ...]]] = [(str(root), "", ((top.st_dev, top.st_ino),))]
    linked: set[tuple[int, int]] = set()  # directories entered through a link (each once: no fan-out blow-up)
    while stack:
        dirpath, rel_dir, chain = stack.pop()
        try:
            with os.scandir(dirpath) as it:
                entries = sorted(it, key=lambda e: e.name)
        except FileNotFoundError:
            continue  # gone since its parent was listed
        except OSError as exc:  # reported, and its stored documents kept: a transient EACCES must not delete them
            skip(Skipped(rel_dir or ".", "unreadable", f"{dirpath} ({exc.strerror or exc})", is_dir=True))
            continue
        subdirs = []
        for entry in entries:
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            try:
                is_link = entry.is_symlink()
            except OSError:
                continue
            try:
                st = os.stat(entry.path)  # through the link, if it is one
            except OSError as exc:
                if is_link:
                    reason = "link_loop" if exc.errno == errno.ELOOP else "broken_link"
                    skip(Skipped(rel, reason, _link_text(entry.path)))
                continue  # a plain entry that vanished between the scan and the stat
            target = os.path.realpath(entry.path)
            if is_link and not follow_external_links and not _inside(target, real_root):
                skip(Skipped(rel, "link_outside_root", target, is_dir=stat.S_ISDIR(st.st_mode)))
                continue
            if stat.S_ISDIR(st.st_mode):
                ident = (st.st_dev, st.st_ino)
                if ident in chain:
                    skip(Skipped(rel, "link_loop", target, is_dir=True))
                    continue
                if is_link:
                    if ident in linked:
                        skip(Skipped(rel, "link_duplicate", target, is_dir=True))
                        continue
                    linked.add(ident)
                subdirs.append((entry.path, rel, chain + (ident,)))
            elif stat.S_ISREG(st.st_mode):
                yield Listed(rel, target, st.st_size, f"mtime:{st.st_mtime_ns}")
            else:
                skip(Skipped(rel, "not_a_file", target))
        stack.extend(reversed(subdirs))


def _link_text(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""


def _iter_s3(loc: Location) -> Iterator[tuple[str, dict]]:
    """ListObjectsV2 page by page (s3fs's paginated iterator, driven from this thread): at most one
    page of entries is held at a time."""
    from fsspec.asyn import sync  # late: see storage.filesystem()

    bucket, _, key = loc.path.partition("/")
    prefix = key + "/" if key else ""
    agen = loc.fs._iterdir(bucket, delimiter="", prefix=prefix)

    async def take(n: int) -> list[dict]:
        out = []
        try:
            for _ in range(n):
                out.append(await agen.__anext__())
        except StopAsyncIteration:
            pass
        return out

    try:
        while page := sync(loc.fs.loop, take, PAGE):
            for info in page:
                name = info["name"]
                if info.get("type") == "file" and not name.endswith("/"):
                    yield name[len(loc.path) + 1:], info
            if len(page) < PAGE:
                return
    finally:
        try:
            sync(loc.fs.loop, agen.aclose)
        except Exception:  # closing an exhausted or broken generator: nothing left to release
            pass


def _iter_walk(loc: Location) -> Iterator[tuple[str, dict]]:
    """Other object stores: directory by directory (one directory's listing in memory at a time)."""
    for dirpath, _dirs, files in loc.fs.walk(loc.path, detail=True):
        for name in sorted(files):
            info = files[name]
            full = info.get("name") or f"{dirpath}/{name}"
            yield full[len(loc.path) + 1:], info
