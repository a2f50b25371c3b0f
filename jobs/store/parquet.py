"""A run's durable record on disk: chunk Parquet parts, the error list, the run description.

Parts are written to a temporary name and renamed, so a run killed mid-write never leaves a torn
file; a resumed run (same --run-id) continues the part numbering. Omitted chunks are kept here
(the QA report reads them) although they are never embedded or loaded.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from jobs.rows import CONTRACT_FIELDS, CONTRACT_NAMES

# Beyond the contract: the document's content hash, so `corpusmill load --from-parquet` can rebuild
# the documents table (the checkpoint) without the sources.
EXTRA_FIELDS = [pa.field("content_sha256", pa.string())]
PARQUET_NAMES = CONTRACT_NAMES + [f.name for f in EXTRA_FIELDS]


def contract_schema(dimension: int) -> pa.Schema:
    fields = [pa.field("embedding", pa.list_(pa.float32(), dimension)) if f.name == "embedding" else f
              for f in CONTRACT_FIELDS]
    return pa.schema(fields + EXTRA_FIELDS)


class RunOutput:
    def __init__(self, run_dir: Path, dimension: int):
        self.run_dir = Path(run_dir)
        self.chunks_dir = self.run_dir / "chunks"
        self.qa_dir = self.run_dir / "qa"
        self.chunks_dir.mkdir(parents=True, exist_ok=True)
        self.qa_dir.mkdir(parents=True, exist_ok=True)
        self.schema = contract_schema(dimension)
        existing = sorted(self.chunks_dir.glob("part-*.parquet"))
        self._next = int(existing[-1].stem.split("-")[1]) + 1 if existing else 0

    def write_part(self, rows: list[dict]) -> Path | None:
        if not rows:
            return None
        table = pa.Table.from_pylist([{k: r.get(k) for k in PARQUET_NAMES} for r in rows], schema=self.schema)
        path = self.chunks_dir / f"part-{self._next:05d}.parquet"
        tmp = path.with_suffix(".parquet.tmp")
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, path)
        self._next += 1
        return path

    def write_errors(self, errors: list[dict]) -> Path:
        path = self.run_dir / "errors.parquet"
        schema = pa.schema([(k, pa.string()) for k in ("source_path", "stage", "error_class", "message")])
        pq.write_table(pa.Table.from_pylist(errors, schema=schema), path)
        return path

    def write_json(self, name: str, data: dict) -> Path:
        path = self.run_dir / name
        path.write_text(json.dumps(data, indent=2, default=str, ensure_ascii=False) + "\n", encoding="utf-8")
        return path


def read_chunks(run_dir: Path) -> pa.Table:
    return pq.read_table(Path(run_dir) / "chunks")
