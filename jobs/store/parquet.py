"""A run's durable record: chunk Parquet parts, the error list, the run description, the QA report.

The run directory is a local directory or an object-store URI (s3://bucket/runs/<run_id>, gs://…,
abfs://…). Locally, parts are written to a temporary name and renamed, so a run killed mid-write never
leaves a torn file. In an object store a part is uploaded as one object, and an object becomes
visible only whole (a single PUT, or a multipart upload completed at the end), so it is written in
place; every file is first written to a local staging copy of the run directory
($CORPUSMILL_HOME/staging/<run_id>), which is what the QA report is computed from, then uploaded.

A part is written (uploaded) before its documents commit to the database, so the run's Parquet holds
every committed document. A resumed run (same --run-id) continues the part numbering. Omitted chunks
are kept here (the QA report reads them) although they are never embedded or loaded.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from jobs.rows import CONTRACT_FIELDS, CONTRACT_NAMES
from jobs.sources.storage import StorageOptions, locate
from jobs.sources.uris import is_remote, local_path
from jobs.terms import TERMS_VERSION

log = logging.getLogger(__name__)

# Beyond the contract: the document's content hash, so `corpusmill load --from-parquet` can rebuild
# the documents table (the checkpoint) without the sources.
EXTRA_FIELDS = [pa.field("content_sha256", pa.string())]
PARQUET_NAMES = CONTRACT_NAMES + [f.name for f in EXTRA_FIELDS]


# A part's metadata names the analyser version its rows' terms were made by (jobs/terms.py): a load
# analyses the rows of a part without it, or of another version, again (terms_current).
TERMS_KEY = b"corpusmill.terms"


def contract_schema(dimension: int) -> pa.Schema:
    fields = [pa.field("embedding", pa.list_(pa.float32(), dimension)) if f.name == "embedding" else f
              for f in CONTRACT_FIELDS]
    return pa.schema(fields + EXTRA_FIELDS, metadata={TERMS_KEY: str(TERMS_VERSION).encode()})


def with_current_terms(table: pa.Table) -> pa.Table:
    """`table` (whose term columns this release's analyser made) marked so, as a part written here is."""
    return table.replace_schema_metadata({**(table.schema.metadata or {}), TERMS_KEY: str(TERMS_VERSION).encode()})


def terms_current(schema: pa.Schema) -> bool:
    """Whether a part's rows carry terms this release's analyser made (the part says so in its metadata)."""
    return (schema.metadata or {}).get(TERMS_KEY) == str(TERMS_VERSION).encode()


def _part_number(name: str) -> int:
    return int(name.rsplit("/", 1)[-1].split(".")[0].split("-")[1])


class RunOutput:
    """`location`: the run directory (a path or a URI). `staging`: the local copy of a remote run
    directory (required for a URI). `run_dir` is always local: the directory the QA code reads."""

    def __init__(self, location: Path | str, dimension: int, storage: StorageOptions | None = None,
                 staging: Path | None = None):
        self.schema = contract_schema(dimension)
        self.storage = storage
        self.remote = locate(str(location), storage) if is_remote(location) else None
        if self.remote is not None:
            if staging is None:
                raise ValueError("a remote run directory needs a local staging directory")
            self.uri = self.remote.uri
            self.run_dir = Path(staging)
        else:
            self.run_dir = local_path(location)
            self.uri = str(self.run_dir)
        self.chunks_dir = self.run_dir / "chunks"
        self.qa_dir = self.run_dir / "qa"
        self.chunks_dir.mkdir(parents=True, exist_ok=True)
        self.qa_dir.mkdir(parents=True, exist_ok=True)
        numbers = [_part_number(p.name) for p in self.chunks_dir.glob("part-*.parquet")]
        if self.remote is not None:
            numbers = self._sync_parts_down()
        self._next = max(numbers) + 1 if numbers else 0

    # ---- remote mirror ---------------------------------------------------------------------------
    def _remote_path(self, rel: str) -> str:
        return f"{self.remote.path}/{rel}"

    def _sync_parts_down(self) -> list[int]:
        """Resuming a remote run: the staging copy gets the parts already uploaded (so the report covers
        the whole run) and loses any part that never made it up (its documents never committed)."""
        remote_fs, prefix = self.remote.fs, self._remote_path("chunks")
        try:
            names = [n for n in remote_fs.ls(prefix, detail=False) if n.rsplit("/", 1)[-1].startswith("part-")
                     and n.endswith(".parquet")]
        except FileNotFoundError:
            names = []
        uploaded = {n.rsplit("/", 1)[-1] for n in names}
        for local in self.chunks_dir.glob("part-*.parquet*"):
            if local.name not in uploaded:
                local.unlink()
        for name in names:
            local = self.chunks_dir / name.rsplit("/", 1)[-1]
            if not local.exists():
                remote_fs.get_file(name, str(local))
        return [_part_number(n) for n in uploaded]

    def _upload(self, local: Path) -> None:
        if self.remote is None:
            return
        rel = local.relative_to(self.run_dir).as_posix()
        # One PUT of the whole file (s3fs switches to a multipart upload, completed at the end, for large
        # ones): readers see the object whole or not at all.
        self.remote.fs.put_file(str(local), self._remote_path(rel))

    def publish(self, subdir: str = "qa") -> None:
        """Upload what the QA code wrote locally under `subdir` (no-op for a local run directory)."""
        if self.remote is None:
            return
        for path in sorted((self.run_dir / subdir).rglob("*")):
            if path.is_file():
                self._upload(path)

    def part_writer(self) -> PartWriter:
        """Where this run's write tasks put their parts: the run directory itself (local or remote),
        as the attempt after every part already there."""
        attempt, self._next = self._next, self._next + 1
        return PartWriter(self.uri, self.schema.field("embedding").type.list_size, attempt, self.storage)

    def fetch_parts(self) -> None:
        """A remote run's parts, written by the tasks, into the staging copy the QA report reads."""
        if self.remote is not None:
            self._sync_parts_down()

    def drop_staged_parts(self) -> None:
        """After the report: the uploaded parts need not stay on the local disk as well."""
        if self.remote is not None:
            shutil.rmtree(self.chunks_dir, ignore_errors=True)

    # ---- writing ---------------------------------------------------------------------------------
    def write_part(self, rows: list[dict]) -> Path | None:
        if not rows:
            return None
        table = pa.Table.from_pylist([{k: r.get(k) for k in PARQUET_NAMES} for r in rows], schema=self.schema)
        path = self.chunks_dir / f"part-{self._next:05d}.parquet"
        tmp = path.with_suffix(".parquet.tmp")
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, path)
        self._upload(path)
        self._next += 1
        return path

    def write_errors(self, errors: list[dict]) -> Path:
        path = self.run_dir / "errors.parquet"
        schema = pa.schema([(k, pa.string()) for k in ("source_path", "stage", "error_class", "message")])
        pq.write_table(pa.Table.from_pylist(errors, schema=schema), path)
        self._upload(path)
        return path

    def write_json(self, name: str, data: dict) -> Path:
        return self.write_text(name, json.dumps(data, indent=2, default=str, ensure_ascii=False) + "\n")

    def write_text(self, name: str, text: str) -> Path:
        path = self.run_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        self._upload(path)
        return path


@dataclass(frozen=True)
class PartWriter:
    """Chunk parts written by parallel write tasks straight into a run directory (a local path the tasks
    can reach, or a URI): `part-<attempt>-<task>-<id>.parquet`. The attempt number comes first, so
    the parts of a resumed run sort after those of its earlier attempt and a reload takes a
    document's later version. A part appears whole or not at all: locally under a temporary name,
    then renamed; in an object store as one upload."""

    location: str
    dimension: int
    attempt: int
    storage: StorageOptions | None = None

    def write(self, table: pa.Table, task: int) -> int:
        """Write `table`'s rows (chunk-schema rows) as one part; returns the parts written (0 or 1)."""
        if not table.num_rows:
            return 0
        schema = contract_schema(self.dimension)
        name = f"part-{self.attempt:05d}-{task:04d}-{uuid.uuid4().hex[:8]}.parquet"
        data = table.select(schema.names).cast(schema)
        if is_remote(self.location):
            loc = locate(self.location, self.storage)
            with tempfile.TemporaryDirectory(prefix="cmpart-") as tmp:
                local = Path(tmp) / name
                pq.write_table(data, local, compression="zstd")
                loc.fs.put_file(str(local), f"{loc.path}/chunks/{name}")
            return 1
        path = local_path(self.location) / "chunks" / name
        tmp = path.with_suffix(".parquet.tmp")
        pq.write_table(data, tmp, compression="zstd")
        os.replace(tmp, path)
        return 1


def fetch_run(location: str, storage: StorageOptions | None, staging: Path) -> Path:
    """A local copy of a run directory in an object store (for `corpusmill report`); a local one as is."""
    if not is_remote(location):
        return local_path(location)
    loc = locate(location, storage)
    staging.mkdir(parents=True, exist_ok=True)
    for name in loc.fs.find(loc.path):
        rel = name[len(loc.path) + 1:]
        target = staging / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        loc.fs.get_file(name, str(target))
    return staging


def part_paths(run_dir: Path | str, storage: StorageOptions | None = None) -> list[str]:
    """A run directory's chunk parts, in write order (paths, or URIs' object paths). Only named parts: a
    run killed mid-write can leave a `.parquet.tmp` behind."""
    if is_remote(run_dir):
        loc = locate(str(run_dir), storage)
        names = loc.fs.ls(f"{loc.path}/chunks", detail=False) if loc.fs.exists(f"{loc.path}/chunks") else []
        return sorted(n for n in names if n.endswith(".parquet"))
    return [str(p) for p in sorted((Path(run_dir) / "chunks").glob("part-*.parquet"))]


@contextmanager
def _run_file(run_dir: Path | str, name: str, storage: StorageOptions | None):
    """A file of a run directory (local or in an object store), open for reading; None when it has none."""
    if is_remote(run_dir):
        loc = locate(str(run_dir), storage)
        path = f"{loc.path}/{name}"
        if not loc.fs.exists(path):
            yield None
            return
        with loc.fs.open(path, "rb") as f:
            yield f
        return
    path = Path(run_dir) / name
    if not path.exists():
        yield None
        return
    with path.open("rb") as f:
        yield f


def read_run_json(run_dir: Path | str, storage: StorageOptions | None = None) -> dict:
    """A run directory's run.json ({} when it has none: a directory of parts only)."""
    with _run_file(run_dir, "run.json", storage) as f:
        return json.loads(f.read().decode("utf-8")) if f is not None else {}


def read_errors(run_dir: Path | str, storage: StorageOptions | None = None) -> list[dict]:
    """The failures a run directory's errors.parquet lists (none when it has none)."""
    with _run_file(run_dir, "errors.parquet", storage) as f:
        return [] if f is None else pq.read_table(f).to_pylist()


def read_refused(run_dir: Path | str, storage: StorageOptions | None = None) -> set[str]:
    """The source paths whose version in this run the database refused at commit (its errors.parquet,
    stage `load`): the run wrote their rows to its parts before the commit failed, and the collection
    kept the version before."""
    return {e["source_path"] for e in read_errors(run_dir, storage) if e["stage"] == "load"}


def read_part(run_dir: Path | str, path: str, storage: StorageOptions | None = None,
              columns: list[str] | None = None, schema_only: bool = False) -> pa.Table | pa.Schema:
    """One part of `part_paths(run_dir)`, whole or only `columns`; or only its schema."""
    def read(source):
        return pq.read_schema(source) if schema_only else pq.read_table(source, columns=columns)

    if is_remote(run_dir):
        with locate(str(run_dir), storage).fs.open(path, "rb") as f:
            return read(f)
    return read(path)


def iter_parts(run_dir: Path | str, storage: StorageOptions | None = None,
               columns: list[str] | None = None) -> Iterator[pa.Table]:
    """A run directory's chunk parts one at a time, in write order (local or in an object store)."""
    for path in part_paths(run_dir, storage):
        yield read_part(run_dir, path, storage, columns)


def read_chunks(run_dir: Path | str, storage: StorageOptions | None = None) -> pa.Table:
    """Every chunk part of a run directory, local or in an object store."""
    parts = list(iter_parts(run_dir, storage))
    return pa.concat_tables(parts) if parts else pa.table({})
