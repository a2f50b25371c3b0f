"""Reload the database from runs' Parquet without recomputation (a new server, a lost database).

The runs given are a history, oldest first: a later run's version of a document replaces an earlier
one's, and a document a later run deleted (its run.json's `deleted`) is not loaded, or is taken out of
the collection if it is there; a version the run's database refused at commit (its errors.parquet) is
not loaded either. A first pass in the driver reads three columns of every part of every
run (and each run.json) to find where each document's last version is; the driver holds an entry per
document, never the rows. Then all the runs of a collection are one Ray Data job: each write task
reads the parts it is given, leaving out the documents whose last version is elsewhere (and within a
part each chunk_id counts once, its last row: a resumed run can write a document twice), and commits
them (jobs/store/writers.py: binary COPY from Arrow, many documents per transaction, each document
atomically with its checkpoint row), so no row passes through the driver or Ray's object store, and
many small runs load as fast as one big one. Into an empty collection, the indexes no commit reads are
built once at the end instead of row by row (PgStore.defer_indexes). A reload can be interrupted and
repeated: a document the collection already holds done, with the same content and pipeline fingerprint,
is not loaded again, and every commit replaces a document whole.
"""

from __future__ import annotations

import logging
import warnings
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from jobs.chunks.ids import doc_id
from jobs.config import JobConfig
from jobs.errors import ConfigError, NotFoundError
from jobs.sources.storage import StorageOptions
from jobs.sources.uris import is_remote
from jobs.store import lexical
from jobs.store.parquet import PARQUET_NAMES, part_paths, read_part, read_refused, read_run_json, terms_current
from jobs.store.pgvector import PgStore
from jobs.store.url import database_url

log = logging.getLogger(__name__)

# What the first pass reads of each part: enough to know each document's last version and the run's model.
_INDEX_COLUMNS = ["collection", "source_path", "chunk_id", "embedding_model", "content_sha256", "pipeline_fingerprint"]


_ORDER = {name: i for i, name in enumerate(PARQUET_NAMES + ["row_kind", "doc_rows"])}  # prepare_part's columns
_DELETED = (-1, -1)  # where a document's last version is, when a run deleted it
_STORED = (-2, -2)  # ... when the collection already holds that version (an earlier load, or an ingest)


def _to_load(where: tuple[int, int]) -> bool:
    return where not in (_DELETED, _STORED)


@dataclass
class _History:
    """Pass one over the runs of one collection, oldest first: where each document's last version is
    (run, part), or that a run deleted it, and so which documents each part must leave out."""

    name: str
    runs: list = field(default_factory=list)  # the run directories, in order
    models: set = field(default_factory=set)
    dimension: int | None = None
    last: dict[str, tuple[int, int]] = field(default_factory=dict)  # doc_id -> (run, part) or _DELETED
    paths: dict[str, str] = field(default_factory=dict)  # doc_id -> source_path
    parts: list[tuple[int, str]] = field(default_factory=list)  # (run, part path), in load order
    leave_out: dict[int, set] = field(default_factory=lambda: defaultdict(set))  # part -> docs whose last version is elsewhere
    dropped: int = 0  # rows not loaded: repeats within a part, and versions a later part replaced or deleted
    _rows: dict[str, int] = field(default_factory=dict)  # doc_id -> rows of its current last version
    _versions: dict[str, tuple] = field(default_factory=dict)  # doc_id -> (content_sha256, pipeline_fingerprint)

    def add_run(self, run_dir, paths: list[str], deleted: list[str], storage, refused: set[str] = frozenset()) -> None:
        """One more run, newer than those added before. `refused`: source paths whose version in this run
        the database refused at commit (read_refused): their rows stay out, the version before stands."""
        r = len(self.runs)
        self.runs.append(run_dir)
        for path_ in deleted:  # an ingest deletes before it commits anything
            doc = doc_id(self.name, path_)
            self._replace(doc, _DELETED, 0)
            self.paths[doc] = path_
        for path in paths:
            part = read_part(run_dir, path, storage, columns=_INDEX_COLUMNS)
            if not part.num_rows:
                continue
            p = len(self.parts)
            self.parts.append((r, path))
            self.models |= {m for m in part.column("embedding_model").to_pylist() if m}
            seen: dict[str, set] = defaultdict(set)
            versions: dict[str, tuple] = {}
            for path_, chunk, sha, fingerprint in zip(*(part.column(c).to_pylist() for c in (
                    "source_path", "chunk_id", "content_sha256", "pipeline_fingerprint"))):
                doc = doc_id(self.name, path_)
                self.dropped += chunk in seen[doc]
                seen[doc].add(chunk)
                self.paths[doc] = path_
                versions[doc] = (sha, fingerprint)
            for doc, chunks in seen.items():
                if self.paths[doc] in refused:
                    self.leave_out[p].add(doc)
                    self.dropped += len(chunks)
                    continue
                self._replace(doc, (r, p), len(chunks))
                self._versions[doc] = versions[doc]

    def _replace(self, doc: str, where: tuple[int, int], rows: int) -> None:
        """`doc`'s last version is now `where` (with `rows` rows): the part that held it leaves it out."""
        before = self.last.get(doc)
        if before is not None and before != _DELETED:
            self.leave_out[before[1]].add(doc)
            self.dropped += self._rows.get(doc, 0)
        self.last[doc], self._rows[doc] = where, rows

    def leave_stored(self, stored: dict) -> int:
        """Leave out each document whose last version the collection already holds, done (`stored`: its
        checkpoint rows by source path, PgStore.stored_documents): the same content through the same
        pipeline makes the same chunks, so a repeated load, or one that resumes a stopped one, commits
        only what is missing or changed. Returns how many were left out."""
        held = 0
        for doc, where in self.last.items():
            row = stored.get(self.paths[doc]) if _to_load(where) else None
            if row is not None and row.status == "done" and (row.content_sha256, row.pipeline_fingerprint) == \
                    self._versions.get(doc):
                self.leave_out[where[1]].add(doc)
                self.last[doc] = _STORED
                held += 1
        return held

    def to_load(self) -> int:
        return sum(map(_to_load, self.last.values()))

    def items(self) -> list[dict]:
        """Read-task items: each part that holds a last version, with the documents it must leave out."""
        winners: dict[int, int] = defaultdict(int)
        for where in self.last.values():
            if _to_load(where):
                winners[where[1]] += 1
        return [{"run_dir": str(self.runs[r]), "path": path, "skip": sorted(self.leave_out.get(p, ()))}
                for p, (r, path) in enumerate(self.parts) if winners[p]]

    def deleted(self) -> list[str]:
        return sorted(self.paths[d] for d, where in self.last.items() if where == _DELETED)


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
    # Every row kept (the usual part): no copy. A take copies every column, vectors and texts included.
    # Typed: a part that a later one replaces whole keeps nothing, and an untyped [] has no take kernel.
    table = part if len(keep) == part.num_rows else part.take(pa.array(keep, pa.int64()))
    kept_docs = [docs[i] for i in keep]
    counts: dict[str, int] = defaultdict(int)
    for d in kept_docs:
        counts[d] += 1
    table = (table.drop_columns([c for c in ("doc_id", "collection") if c in table.column_names])
             .append_column("doc_id", pa.array(kept_docs, pa.string()))
             .append_column("collection", pa.array([collection] * len(keep), pa.string()))
             .append_column("row_kind", pa.array(["chunk"] * len(keep), pa.string()))
             .append_column("doc_rows", pa.array([counts[d] for d in kept_docs], pa.int32())))
    # Parquet from before the terms were analysed on the workers, or analysed by an earlier analyser:
    # analysed here, once, on the read tasks.
    if not terms_current(part.schema):
        table = table.drop_columns([c for c in lexical.LEX_COLUMNS if c in table.column_names])
    table = lexical.fill(table)
    # Columns in the order a current part has them: a writer joins documents of several parts (of runs
    # before and after an analyser's release, in a reload of a history) into one table, by position.
    table = table.select(sorted(table.column_names, key=lambda c: _ORDER.get(c, len(_ORDER))))
    if _grouped(kept_docs, table.column("seq").to_numpy()):
        return table  # as a run writes its parts: each document's rows together, in seq order
    return table.sort_by([("doc_id", "ascending"), ("seq", "ascending")])


def _grouped(docs: list[str], seq) -> bool:
    """Whether each document's rows are together and in increasing seq order (what the writers need of
    a batch; the sort that would make them so copies every column)."""
    if len(docs) < 2:
        return True
    same = [a == b for a, b in zip(docs, docs[1:])]
    runs = len(docs) - sum(same)
    return runs == len(set(docs)) and all(s2 > s1 for s1, s2, t in zip(seq, seq[1:], same) if t)


@dataclass(frozen=True)
class _ReadParts:
    """The read step: batches of (run_dir, path, skip) rows in, the prepared parts out."""
    collection: str
    storage: StorageOptions | None

    def __call__(self, batch: pa.Table) -> pa.Table:
        return pa.concat_tables([prepare_part(read_part(r["run_dir"], r["path"], self.storage), self.collection,
                                              set(r["skip"] or ())) for r in batch.to_pylist()])


def _histories(run_dirs: list, storage, collection: str | None) -> list[_History]:
    """The runs grouped by the collection they load into (`collection`, else each run's own), each
    group's first pass done."""
    out: dict[str, _History] = {}
    for run_dir in run_dirs:
        if not is_remote(run_dir) and not (Path(run_dir) / "chunks").is_dir():
            raise NotFoundError(f"{run_dir} has no chunks/ folder: is it a corpusmill run directory?")
        paths = part_paths(run_dir, storage)
        info = read_run_json(run_dir, storage)
        name = collection or info.get("collection")
        if name is None and paths:
            name = read_part(run_dir, paths[0], storage, columns=["collection"]).column("collection")[0].as_py()
        if name is None:
            if is_remote(run_dir):
                raise NotFoundError(f"{run_dir} has no chunks/ parts: is it a corpusmill run directory?")
            continue
        if paths:
            schema = read_part(run_dir, paths[0], storage, schema_only=True)
            if "content_sha256" not in schema.names:
                raise ConfigError(f"{run_dir} was written before runs recorded content_sha256; re-run ingest instead")
        history = out.setdefault(name, _History(name))
        history.add_run(run_dir, paths, info.get("deleted") or [], storage, read_refused(run_dir, storage))
        if paths and history.dimension is None:
            history.dimension = schema.field("embedding").type.list_size
        if len(history.models) > 1:
            raise ConfigError(f"{run_dir}: the runs loaded into {name!r} hold more than one embedding model "
                              f"({', '.join(sorted(history.models))}): a reembed moved the collection between "
                              "them, and it writes no run; load the runs before it, `corpusmill reembed` the "
                              "collection to the later model, then load the runs after it")
    return list(out.values())


def load_from_parquet(cfg: JobConfig, run_dirs: list[Path | str], collection: str | None = None,
                      writers: int | None = None) -> dict:
    """Each collection's history of runs committed in one job by `writers` parallel write tasks (default
    `sink.writers`)."""
    # Ray and the writers are imported when a load runs: this module stays light for the CLI.
    import ray.data

    from jobs.ray_session import init_ray, stop_ray_in_background  # late: imports Ray
    from jobs.store.datasink import PartsDatasink, writer_args  # late: imports Ray Data
    from jobs.store.sink_stats import SinkStats  # late: with the sink above, where a load runs

    writers = writers or cfg.sink.writers_for()
    loaded = {"documents": 0, "vectors": 0, "shared": 0, "runs": 0, "duplicates_dropped": 0, "failed": 0,
              "deleted": 0, "unchanged": 0, "writers": writers}
    storage = StorageOptions.from_config(cfg.storage)
    url = database_url(cfg)
    started = False
    try:
        with PgStore(url, cfg.database.schema_name, reconnect_seconds=cfg.database.reconnect_seconds) as store:
            store.migrate()
            for history in _histories(run_dirs, storage, collection):
                name = history.name
                last_run = Path(str(history.runs[-1]).rstrip("/")).name
                # No ingest may commit into the collection while it is reloaded.
                store.lock_collection(name, f"corpusmill load {last_run}", cfg.database.lock_wait_seconds)
                items = history.items()
                if history.models:
                    coll = store.ensure_collection(name, next(iter(history.models)), history.dimension,
                                                   "the runs loaded hold")
                else:
                    coll = store.get_collection(name)
                gone = history.deleted()
                if coll is not None and gone:
                    for path_ in store.stored_documents(name, gone):
                        store.delete_document(coll, path_)
                        loaded["deleted"] += 1
                loaded["runs"] += len(history.runs)
                if coll is not None and items:
                    held = history.leave_stored(store.stored_documents(name))
                    loaded["unchanged"] += held
                    if held:
                        log.info("%s already holds %d of these documents as they are here: not loaded again", name, held)
                    items = history.items()
                if items:
                    if coll is not None and store.defer_indexes(coll):
                        log.info("%s is empty: indexes no commit reads are built after the load", name)
                    started = init_ray(cfg) or started
                    log.info("loading %s: %d runs, %d parts, %d documents, %d writers", name, len(history.runs),
                             len(items), history.to_load(), writers)
                    first = history.runs[0]
                    sink = PartsDatasink(
                        _ReadParts(name, storage), url, cfg.database.schema_name, coll, last_run,
                        label=f"corpusmill load {last_run}", share_text=cfg.database.shared_text == "once",
                        batch_rows=cfg.sink.flush_rows,
                        batch_seconds=cfg.sink.flush_seconds, reconnect_seconds=cfg.database.reconnect_seconds,
                        owner=store.owner_token(name))
                    with warnings.catch_warnings():
                        # Ray 2.60 names no parameter for a scheduling strategy: placement() must go in
                        # ray_remote_args, which it calls deprecated.
                        warnings.filterwarnings("ignore", message="`ray_remote_args` is deprecated")
                        # A few blocks of parts per writer: a write task has a connection to open and
                        # bookkeeping to do, which a task per small part would pay hundreds of times.
                        (ray.data.from_items(items, override_num_blocks=min(len(items), 4 * writers))
                         .write_datasink(sink, concurrency=min(writers, len(items)),
                                         ray_remote_args=writer_args(first, url, cfg.sink.placement)))
                    stats: SinkStats = sink.stats
                    loaded["documents"] += stats.docs_done
                    loaded["vectors"] += stats.vectors
                    loaded["shared"] += stats.shared
                    loaded["failed"] += stats.docs_failed
                    loaded["duplicates_dropped"] += history.dropped + stats.duplicate_rows
                    log.info("loaded %s: %d documents (%d duplicate rows dropped, %d transactions)", name,
                             stats.docs_done, history.dropped + stats.duplicate_rows, stats.transactions)
                if coll is not None:
                    store.ensure_indexes(coll, cfg.database)
                    loaded["collection"] = coll.name
                store.unlock_collection(name)
    finally:
        if started:
            stop_ray_in_background().join(timeout=30)
    return loaded
