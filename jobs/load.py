"""Reload the database from runs' Parquet without recomputation (a new server, a lost database).

Each run is one Ray Data job: read tasks take the run's Parquet parts and parallel writers commit
their documents (jobs/store/writers.py: binary COPY from Arrow, many documents per transaction,
each document atomically with its checkpoint row), so no row passes through the driver. Runs are
loaded one after another, oldest first, so a later run's version of a document lands after an
earlier one's and several runs rebuild the state they produced. A reload can be interrupted and
repeated: every commit replaces a document whole.

A resumed run (or a part written just before a kill, whose documents the resumed run processed
again) can hold one document in two parts: the later part is the version that committed last. A
first pass in the driver reads three columns of each part to find each document's last part; the
read tasks leave the other versions out, and within a part each chunk_id counts once (its last row).
The driver holds an entry per document, never the rows.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from jobs.chunks.ids import doc_id
from jobs.config import JobConfig
from jobs.errors import ConfigError, NotFoundError
from jobs.sources.storage import StorageOptions
from jobs.sources.uris import is_remote
from jobs.store.parquet import part_paths, read_part
from jobs.store.pgvector import PgStore
from jobs.store.url import database_url

log = logging.getLogger(__name__)

# What the first pass reads of each part: enough to know each document's last version and the run's model.
_INDEX_COLUMNS = ["collection", "source_path", "chunk_id", "embedding_model"]


@dataclass
class _RunIndex:
    """Pass one over a run's parts (a few columns each): in which part each document's last version is,
    and so which documents each part must leave out."""

    name: str | None = None
    models: set = field(default_factory=set)
    last: dict[str, int] = field(default_factory=dict)  # doc_id -> index of the part with its last version
    skip: dict[int, set] = field(default_factory=lambda: defaultdict(set))  # part -> documents a later part replaces
    dropped: int = 0  # rows not loaded: repeats within a part, and versions a later part replaced

    @classmethod
    def read(cls, run_dir, paths: list[str], storage, collection: str | None) -> "_RunIndex":
        index, rows_of = cls(), {}
        for i, path in enumerate(paths):
            part = read_part(run_dir, path, storage, columns=_INDEX_COLUMNS)
            if not part.num_rows:
                continue
            index.name = index.name or collection or part.column("collection")[0].as_py()
            index.models |= {m for m in part.column("embedding_model").to_pylist() if m}
            seen: dict[str, set] = defaultdict(set)
            for path_, chunk in zip(part.column("source_path").to_pylist(), part.column("chunk_id").to_pylist()):
                doc = doc_id(index.name, path_)
                index.dropped += chunk in seen[doc]
                seen[doc].add(chunk)
            for doc, chunks in seen.items():
                if doc in index.last:
                    index.skip[index.last[doc]].add(doc)
                    index.dropped += rows_of[doc]
                index.last[doc], rows_of[doc] = i, len(chunks)
        return index


def prepare_part(part: pa.Table, collection: str, skip: set[str]) -> pa.Table:
    """A part's rows as the writers take them: doc_id derived for `collection` (doc_id derives from the
    collection name, so a load under another name re-derives it, and the next ingest into that
    collection finds and replaces these rows), each chunk once (its last row), documents a later part
    replaces left out, each document's rows together in seq order with its row count."""
    paths = part.column("source_path").to_pylist()
    ids_of = {p: doc_id(collection, p) for p in set(paths)}
    docs = [ids_of[p] for p in paths]
    last: dict[tuple[str, str], int] = {}
    for i, (d, c) in enumerate(zip(docs, part.column("chunk_id").to_pylist())):
        if d not in skip:
            last[(d, c)] = i
    keep = sorted(last.values())
    # Typed: a part that a later one replaces whole keeps nothing, and an untyped [] has no take kernel.
    table = part.take(pa.array(keep, pa.int64()))
    kept_docs = [docs[i] for i in keep]
    counts: dict[str, int] = defaultdict(int)
    for d in kept_docs:
        counts[d] += 1
    table = (table.drop_columns([c for c in ("doc_id", "collection") if c in table.column_names])
             .append_column("doc_id", pa.array(kept_docs, pa.string()))
             .append_column("collection", pa.array([collection] * len(keep), pa.string()))
             .append_column("row_kind", pa.array(["chunk"] * len(keep), pa.string()))
             .append_column("doc_rows", pa.array([counts[d] for d in kept_docs], pa.int32())))
    return table.sort_by([("doc_id", "ascending"), ("seq", "ascending")])


@dataclass(frozen=True)
class _ReadParts:
    """The read tasks' function: batches of (path, skip) rows in, the prepared parts out."""
    run_dir: str
    collection: str
    storage: StorageOptions | None

    def __call__(self, batch: pa.Table) -> pa.Table:
        return pa.concat_tables([prepare_part(read_part(self.run_dir, r["path"], self.storage), self.collection,
                                              set(r["skip"] or ())) for r in batch.to_pylist()])


def load_from_parquet(cfg: JobConfig, run_dirs: list[Path | str], collection: str | None = None,
                      writers: int | None = None) -> dict:
    """Each run's documents committed by `writers` parallel write tasks (default `sink.writers`)."""
    # Ray and the writers are imported when a load runs: this module stays light for the CLI.
    import ray.data

    from jobs.ray_session import init_ray, stop_ray_in_background  # late: imports Ray
    from jobs.store.datasink import ChunkDatasink, placement, writer_args  # late: imports Ray Data
    from jobs.store.writers import SinkStats  # late: with the sink above, where a load runs

    writers = writers or cfg.sink.writers_for()
    loaded = {"documents": 0, "vectors": 0, "shared": 0, "runs": 0, "duplicates_dropped": 0, "failed": 0,
              "writers": writers}
    storage = StorageOptions.from_config(cfg.storage)
    url = database_url(cfg)
    locked: set[str] = set()
    started = False
    try:
        with PgStore(url, cfg.database.schema_name, reconnect_seconds=cfg.database.reconnect_seconds) as store:
            store.migrate()
            coll = None
            for run_dir in run_dirs:
                if not is_remote(run_dir) and not (Path(run_dir) / "chunks").is_dir():
                    raise NotFoundError(f"{run_dir} has no chunks/ folder: is it a corpusmill run directory?")
                paths = part_paths(run_dir, storage)
                index = _RunIndex.read(run_dir, paths, storage, collection)
                if index.name is None:
                    if is_remote(run_dir):
                        raise NotFoundError(f"{run_dir} has no chunks/ parts: is it a corpusmill run directory?")
                    continue
                if len(index.models) != 1:
                    raise ConfigError(f"{run_dir}: expected one embedding model in the run, found {sorted(index.models)}")
                schema = read_part(run_dir, paths[0], storage, schema_only=True)
                if "content_sha256" not in schema.names:
                    raise ConfigError(f"{run_dir} was written before runs recorded content_sha256; re-run ingest instead")
                name = index.name
                if name not in locked:  # no ingest may commit into the collection while it is reloaded
                    store.lock_collection(name, f"corpusmill load {Path(str(run_dir)).name}",
                                          cfg.database.lock_wait_seconds)
                    locked.add(name)
                coll = store.ensure_collection(name, next(iter(index.models)), schema.field("embedding").type.list_size)
                started = init_ray(cfg) or started
                run_name = Path(str(run_dir).rstrip("/")).name
                log.info("loading %s: %d parts, %d documents, %d writers", run_dir, len(paths), len(index.last), writers)
                items = [{"path": p, "skip": sorted(index.skip.get(i, ()))} for i, p in enumerate(paths)]
                args = placement(run_dir, url, cfg.sink.placement)
                sink = ChunkDatasink(url, cfg.database.schema_name, coll, run_name, label=f"corpusmill load {run_name}",
                                     share_text=cfg.database.shared_text == "once",
                                     batch_rows=cfg.sink.flush_rows, batch_seconds=cfg.sink.flush_seconds,
                                     reconnect_seconds=cfg.database.reconnect_seconds)
                (ray.data.from_items(items, override_num_blocks=len(items))
                 .map_batches(_ReadParts(str(run_dir), name, storage), batch_size=1, batch_format="pyarrow", **args)
                 .write_datasink(sink, concurrency=writers,
                                 ray_remote_args=writer_args(run_dir, url, cfg.sink.placement)))
                stats: SinkStats = sink.stats
                loaded["documents"] += stats.docs_done
                loaded["vectors"] += stats.vectors
                loaded["shared"] += stats.shared
                loaded["failed"] += stats.docs_failed
                loaded["duplicates_dropped"] += index.dropped + stats.duplicate_rows
                loaded["runs"] += 1
                log.info("loaded %s: %d documents so far (%d duplicate rows dropped, %d transactions)", run_dir,
                         loaded["documents"], loaded["duplicates_dropped"], stats.transactions)
            if coll is not None:
                store.ensure_indexes(coll, cfg.database)
                loaded["collection"] = coll.name
    finally:
        if started:
            stop_ray_in_background().join(timeout=30)
    return loaded

