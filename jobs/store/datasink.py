"""The write path on Ray: DocumentWriter (jobs/store/writers.py: the guarantee) as a Ray Data
Datasink, and where its write tasks run.

`Dataset.write_datasink(ChunkDatasink(…), concurrency=writers, ray_remote_args=writer_args(…))`: each
write task commits whole documents from a worker with its own connection; `on_write_complete` sums
the tasks' counts and assembles the documents Ray Data split across tasks.
"""

from __future__ import annotations

import psycopg
import pyarrow as pa
import ray
from ray.data import Datasink
from ray.data.datasource.datasink import WriteResult
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from jobs.sources.uris import is_remote
from jobs.store.writers import DocumentWriter


class ChunkDatasink(DocumentWriter, Datasink):
    """DocumentWriter run by Ray Data's write tasks."""

    def get_name(self) -> str:
        return "CorpusmillWrite"

    def on_write_complete(self, write_result: WriteResult) -> None:
        self.complete(write_result.write_returns)


class PartsDatasink(ChunkDatasink):
    """A ChunkDatasink whose blocks name Parquet parts (a reload's items) and whose write tasks read them
    with `read` (an items table in, the part's chunk rows out), one part in memory at a time: the rows go
    from Parquet to the COPY in one process, never through Ray's object store, and the job starts only
    its writers' workers (a read stage of its own would start a worker per CPU, each importing Ray Data,
    pyarrow and the store)."""

    def __init__(self, read, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.read = read

    def write(self, blocks, ctx):
        def parts():
            for block in blocks:
                items = pa.table(block) if not isinstance(block, pa.Table) else block
                for i in range(items.num_rows):
                    yield self.read(items.slice(i, 1))
        return super().write(parts(), ctx)


def local_only(url: str) -> bool:
    """Whether the database URL reaches the server only from this machine (a Unix socket, localhost):
    writers must then run on the driver's node."""
    host = psycopg.conninfo.conninfo_to_dict(url).get("host") or ""
    return not host or host.startswith("/") or host.split(",")[0] in ("localhost", "127.0.0.1", "::1")


def placement(location, url: str, mode: str = "auto") -> dict:
    """Where write tasks (and a reload's read tasks) run (`sink.placement`). `driver`: on the driver's
    node; `spread`: over the cluster's nodes (every node must reach the database and the run
    directory); `auto`: the driver's node when the run directory is a local path or the database URL
    reaches only this machine (a Unix socket, localhost), else spread. `location` None: the job has no
    run directory (a re-embed reads and writes the database only). Call with Ray up."""
    if mode == "spread" or (mode == "auto" and (location is None or is_remote(location)) and not local_only(url)):
        # Writers hold no CPU, so Ray's default would keep them all on the submitting node.
        return {"scheduling_strategy": "SPREAD"}
    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)}


def writer_args(location, url: str, mode: str = "auto") -> dict:
    """The write tasks' Ray arguments: where they run (placement), and no CPU. A writer waits on the
    database more than it computes, and actors holding every CPU of a local Ray must not starve it;
    `concurrency` is what bounds the writers."""
    return placement(location, url, mode) | {"num_cpus": 0}
