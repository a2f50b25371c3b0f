"""Where corpora and run outputs live: a local path or an object-store URI, behind one small interface.

    s3://bucket/prefix            AWS S3, or any S3-compatible store (MinIO, Ceph) with `storage.endpoint_url`
                                  or AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL
    gs://bucket/prefix            Google Cloud Storage (needs the `gcsfs` package)
    abfs://container/prefix       Azure Blob Storage / ADLS Gen2 (needs the `adlfs` package)
    /any/local/path               the local filesystem, exactly as before

Object stores are reached through fsspec filesystems (s3fs, gcsfs, adlfs), the same objects Ray Data and
pyarrow accept. Credentials come from each SDK's standard chain (environment variables, profiles,
instance or workload roles) or from `storage.secret_file`, read once in the driver into SecretStr
values that travel to the Ray workers inside the stage arguments; they are never logged, written to
the runs table, the Parquet files or the QA report, and a URI carrying credentials is refused.

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

import configparser
import errno
import hashlib
import os
import stat
import tempfile
import threading
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterator
from urllib.parse import urlsplit

import yaml
from pydantic import SecretStr

from jobs.errors import ConfigError, MissingPackageError, NotFoundError

# URI scheme -> the fsspec protocol that serves it.
SCHEMES = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs", "abfs": "abfs", "abfss": "abfs", "az": "abfs"}
_PACKAGES = {"s3": "s3fs", "gcs": "gcsfs", "abfs": "adlfs"}
# Keys a secret file may hold, per protocol, and the fsspec argument each becomes.
_SECRET_KEYS = {
    "s3": {"aws_access_key_id": "key", "aws_secret_access_key": "secret", "aws_session_token": "token"},
    "gcs": {"gcs_token": "token"},
    "abfs": {"azure_account_name": "account_name", "azure_account_key": "account_key",
             "azure_sas_token": "sas_token", "azure_connection_string": "connection_string"},
}
ALL_SECRET_KEYS = {k for keys in _SECRET_KEYS.values() for k in keys}
PAGE = 1000  # objects fetched per listing round trip (S3's own page size)

# What this process read from object stores and local sources: objects opened and bytes. Discovery
# reports it (`plan --json` prints `read`), and the tests use it to prove unchanged objects stay unread.
READS: Counter = Counter()
_READS_LOCK = threading.Lock()


def _count(objects: int, nbytes: int) -> None:
    with _READS_LOCK:
        READS["objects"] += objects
        READS["bytes"] += nbytes


class SourceChanged(RuntimeError):
    """The object changed between planning and reading: its chunks are not replaced this run (retried next)."""


@dataclass(frozen=True)
class StorageOptions:
    """What any process (driver or Ray worker) needs to open a filesystem. The secrets are SecretStr, so
    a repr, a log line or a traceback shows them as '**********'."""

    endpoint_url: str | None = None
    region: str | None = None
    profile: str | None = None
    anonymous: bool = False
    secrets: tuple[tuple[str, SecretStr], ...] = ()

    @classmethod
    def from_config(cls, storage: Any | None) -> "StorageOptions":
        """From the config's `storage` section; the secret file (if any) is read here, in the driver."""
        if storage is None:
            return cls()
        secrets = read_secret_file(storage.secret_file, storage.profile) if storage.secret_file else {}
        return cls(endpoint_url=storage.endpoint_url, region=storage.region, profile=storage.profile,
                   anonymous=storage.anonymous, secrets=tuple(sorted(secrets.items())))

    def fsspec_kwargs(self, protocol: str) -> dict[str, Any]:
        kw: dict[str, Any] = {}
        names = _SECRET_KEYS.get(protocol, {})
        secrets = {names[k]: v.get_secret_value() for k, v in self.secrets if k in names}
        if protocol == "s3":
            kw["use_listings_cache"] = False
            endpoint = self.endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
            if endpoint:
                kw["endpoint_url"] = endpoint
            if self.region:
                kw["client_kwargs"] = {"region_name": self.region}
            if self.anonymous:
                kw["anon"] = True
            elif self.profile and not secrets:
                kw["profile"] = self.profile
        elif protocol == "gcs":
            if self.endpoint_url:
                kw["endpoint_url"] = self.endpoint_url
            if self.anonymous:
                kw["token"] = "anon"
        elif protocol == "abfs":
            if self.anonymous:
                kw["anon"] = True
        kw.update(secrets)
        return kw


def read_secret_file(path: Path | str, profile: str | None = None) -> dict[str, SecretStr]:
    """Credentials from a file: a YAML/JSON mapping of the keys in `_SECRET_KEYS`, or an AWS shared
    credentials file (INI: `[default]` or `[profile]` with aws_access_key_id/aws_secret_access_key)."""
    path = Path(path).expanduser()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise NotFoundError(f"storage.secret_file {path} cannot be read ({exc.strerror})") from None
    if text.lstrip().startswith("["):
        ini = configparser.ConfigParser()
        ini.read_string(text)
        section = profile or "default"
        if section not in ini:
            raise ConfigError(f"storage.secret_file {path} has no [{section}] section")
        data = dict(ini[section])
    else:
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError:
            data = None
        if not isinstance(data, dict):
            raise ConfigError(f"storage.secret_file {path} is neither a YAML/JSON mapping nor an INI credentials file")
    unknown = sorted(set(data) - ALL_SECRET_KEYS)
    if unknown:  # key names only: never the values
        raise ConfigError(f"storage.secret_file {path}: unknown keys {unknown}; expected some of {sorted(ALL_SECRET_KEYS)}")
    return {k: SecretStr(str(v)) for k, v in data.items() if v is not None}


# ---- URIs ---------------------------------------------------------------------------------------

def scheme_of(uri: str | os.PathLike) -> str | None:
    """The object-store scheme of `uri` (`s3`, `gs`, …), or None for a local path (`file://` included)."""
    text = str(uri)
    if "://" not in text:
        return None
    scheme = text.split("://", 1)[0].lower()
    if scheme == "file":
        return None
    if scheme not in SCHEMES:
        raise ConfigError(f"unsupported URI scheme {scheme!r} in {text!r}: use a local path, "
                         f"{', '.join(s + '://' for s in sorted(SCHEMES))}")
    return scheme


def is_remote(uri: str | os.PathLike) -> bool:
    return scheme_of(uri) is not None


def check_uri(uri: str) -> str:
    """Refuse credentials embedded in a URI (they would end up in logs and the runs table)."""
    text = str(uri)
    if "://" in text:
        parts = urlsplit(text)
        if parts.password is not None or (parts.username is not None and scheme_of(text) == "s3"):
            raise ConfigError(f"credentials in a URI are refused ({parts.scheme}://…@{parts.hostname}): use the "
                             "environment, a profile or storage.secret_file")
    return text


def local_path(uri: str | os.PathLike) -> Path:
    text = str(uri)
    return Path(text[len("file://"):]) if text.startswith("file://") else Path(text)


def normalize_root(root: str | os.PathLike) -> str:
    """A root as recorded (manifests): URIs without a trailing slash, plain local paths made absolute."""
    text = str(root)
    if "://" in text:
        return text.rstrip("/")
    return str(Path(text).resolve())


def join(uri: str, *parts: str) -> str:
    if not is_remote(uri):
        return str(local_path(uri).joinpath(*parts))
    return "/".join([uri.rstrip("/"), *(p.strip("/") for p in parts)])


@dataclass(frozen=True)
class Location:
    uri: str  # as the user wrote it, normalised (no trailing slash)
    protocol: str  # fsspec protocol: s3, gcs, abfs, or file
    path: str  # the filesystem's own path: bucket/key for object stores, absolute path locally
    fs: Any  # an fsspec filesystem

    @property
    def local(self) -> bool:
        return self.protocol == "file"


_FS_CACHE: dict[tuple, Any] = {}
_FS_LOCK = threading.Lock()


def filesystem(protocol: str, storage: StorageOptions | None = None) -> Any:
    """An fsspec filesystem for `protocol`, one per process and option set."""
    import fsspec  # late: fsspec and its backends load on first use; local discovery and config checks never need them

    storage = storage or StorageOptions()
    key = (protocol, storage, os.getpid())
    with _FS_LOCK:
        if key not in _FS_CACHE:
            try:
                _FS_CACHE[key] = fsspec.filesystem(protocol, **storage.fsspec_kwargs(protocol))
            except ImportError as exc:
                pkg = _PACKAGES.get(protocol, protocol)
                raise MissingPackageError(f"{protocol}:// needs the {pkg} package: pip install {pkg}") from exc
        return _FS_CACHE[key]


def locate(uri: str | os.PathLike, storage: StorageOptions | None = None) -> Location:
    scheme = scheme_of(uri)
    if scheme is None:
        path = local_path(uri).resolve()
        return Location(str(path), "file", str(path), filesystem("file"))
    text = check_uri(str(uri)).rstrip("/")
    protocol = SCHEMES[scheme]
    path = text.split("://", 1)[1]
    if not path:
        raise ConfigError(f"{uri!r} names no bucket")
    return Location(text, protocol, path, filesystem(protocol, storage))


# ---- listing ------------------------------------------------------------------------------------

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
        raise NotFoundError(f"input root is not a directory: {root}")
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
    from fsspec.asyn import sync  # late: see filesystem()

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
    for dirpath, dirs, files in loc.fs.walk(loc.path, detail=True):
        for name in sorted(files):
            info = files[name]
            full = info.get("name") or f"{dirpath}/{name}"
            yield full[len(loc.path) + 1:], info


# ---- reading ------------------------------------------------------------------------------------

def read_bytes(uri: str, storage: StorageOptions | None = None) -> bytes:
    if is_remote(uri):
        loc = locate(uri, storage)
        data = loc.fs.cat_file(loc.path)
    else:
        data = local_path(uri).read_bytes()
    _count(1, len(data))
    return data


WHOLE_READ = 16 << 20  # objects up to this size are hashed from one GET; larger ones are streamed


def sha256_of(uri: str, storage: StorageOptions | None = None, size: int | None = None, chunk: int = 1 << 20) -> str:
    """Streamed: a large object is hashed without holding it in memory. `size` (from the listing) lets a
    small object be fetched with a single GET, without asking the store for its size first."""
    h, n = hashlib.sha256(), 0
    if is_remote(uri) and size is not None and size <= WHOLE_READ:
        return hashlib.sha256(read_bytes(uri, storage)).hexdigest()
    if is_remote(uri):
        loc = locate(uri, storage)
        fh = loc.fs.open(loc.path, "rb", block_size=8 << 20)
    else:
        fh = open(local_path(uri), "rb")
    with fh:
        while block := fh.read(chunk):
            h.update(block)
            n += len(block)
    _count(1, n)
    return h.hexdigest()


# ---- work items (inside the Ray stages) ---------------------------------------------------------

def work_bytes(work: dict, storage: StorageOptions | None = None) -> bytes:
    """The bytes of a work item's source: carried in the item (`--read-via-driver`) or read here, on
    whichever node runs the task. They must hash to the sha256 the plan decided on; otherwise the
    object changed since planning, and the document fails this run (retried, with its new content, next)."""
    data = work.get("content")
    if data is None:
        data = read_bytes(work["abs_path"], storage)
    expected = work.get("content_sha256")
    if expected and hashlib.sha256(data).hexdigest() != expected:
        raise SourceChanged(f"{work['source_path']} changed after the plan was made; the next run picks up the new "
                            "content")
    return data


@contextmanager
def work_local_file(work: dict, storage: StorageOptions | None = None, max_bytes: int | None = None) -> Iterator[Path]:
    """A local file with the work item's content, for readers that need a real file (openpyxl, zipfile).
    A local source is used in place; otherwise the bytes go to a temporary directory under the source's
    own file name (the name decides the format and a CSV's sheet name) and are removed afterwards."""
    if work.get("content") is None and not is_remote(work["abs_path"]):
        yield local_path(work["abs_path"])
        return
    size = work.get("size_bytes")
    if max_bytes is not None and size is not None and size > max_bytes:
        raise ValueError(f"workbook is {size:,} bytes, over excel.max_file_bytes={max_bytes:,}")
    data = work_bytes(work, storage)
    with tempfile.TemporaryDirectory(prefix="corpusmill-src-") as tmp:
        path = Path(tmp) / Path(work["source_path"]).name
        path.write_bytes(data)
        del data
        yield path


# ---- where Ray may read from --------------------------------------------------------------------

def plain_local(root: str | os.PathLike) -> bool:
    """A local path as typed (not `file://`): it exists on this machine and, as far as we know, only here."""
    return "://" not in str(root)


def local_read_refusal(roots: list[str], alive_nodes: int, read_via_driver: bool) -> str | None:
    """Why a run must not start, or None. A plain local path exists on this machine only: with more than
    one Ray node, some parse tasks would land where it does not exist and half the reads would fail.
    `file:///path` says on purpose that the path is a filesystem mounted at the same place on every node."""
    local = [str(r) for r in roots if plain_local(r)]
    if not local or alive_nodes <= 1 or read_via_driver:
        return None
    return (f"input root {local[0]} is a local path, but Ray runs on {alive_nodes} nodes and a parse task may run "
            "on a node where it does not exist. Put the corpus in object storage (--input s3://bucket/prefix, "
            "gs://…, abfs://…); or, for a filesystem mounted at the same path on every node, give it as "
            f"file://{Path(local[0]).resolve()}; or pass --read-via-driver (config input.read_via_driver) to have "
            "the driver read the files into the work items (small corpora only: every byte passes through the "
            "driver's memory).")
