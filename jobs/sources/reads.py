"""Reading sources: whole objects, streamed hashes, the work items inside the Ray stages, and where
Ray may read from. Every read is counted in `READS`.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from jobs.errors import FileRefused
from jobs.sources.storage import StorageOptions, locate
from jobs.sources.uris import is_remote, local_path

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
        fh = open(local_path(uri), "rb")  # noqa: SIM115 (closed by the `with fh` below, as the remote handle is)
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
        raise FileRefused(f"workbook is {size:,} bytes, over excel.max_file_bytes={max_bytes:,}")
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
