"""Names of database objects: chunk tables, their indexes, advisory-lock keys.

The one place they are derived, so the index a probe looks for is the index that was built and two long
names never collapse into one: PostgreSQL truncates an identifier over 63 bytes, silently, so every
name is bounded here (and hashed when it would not fit) before the server sees it.
"""

from __future__ import annotations

import hashlib
import re

IDENTIFIER_BYTES = 63  # PostgreSQL truncates longer identifiers, silently


def bounded_name(name: str, suffix: str = "") -> str:
    """`name` + `suffix`, at most 63 bytes. A longer one keeps its head and gets a short hash of the whole,
    so two long names never collapse into one (PostgreSQL would truncate both to the same prefix)."""
    full = name + suffix
    if len(full.encode()) <= IDENTIFIER_BYTES:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:8]
    head = name.encode()[:IDENTIFIER_BYTES - len(suffix.encode()) - 9].decode(errors="ignore")
    return f"{head}_{digest}{suffix}"


def chunk_table_name(collection: str, model: str, dimension: int) -> str:
    """`chunks_<collection>_<model slug>_<dim>`, kept under PostgreSQL's 63-byte identifier limit."""
    slug = re.sub(r"[^a-z0-9]+", "_", model.lower().rsplit("/", 1)[-1]).strip("_")
    return bounded_name(f"chunks_{collection}_{slug}_{dimension}")


def reuse_table_name(table: str) -> str:
    """Where a retired space's vectors wait while the space is rebuilt (jobs/store/spaces.py begin_space)."""
    return bounded_name(table, "_reuse")


def index_name(table: str, kind: str) -> str:
    """The name of a chunk table's `hnsw` or `doc` index: the one helper every caller uses, so the
    index an index-metrics probe looks for is the index that was built. Derived from the table name
    (itself at most 63 bytes), hashed when the two together would not fit."""
    return bounded_name(table, f"_{kind}" if kind == "hnsw" else f"_{kind}_idx")


def lock_key(schema: str, name: str) -> int:
    """The advisory-lock key (a signed 64-bit int) of `name` in `schema`: a collection's write lock, or
    `create:<collection>` for its creation."""
    digest = hashlib.sha256(f"corpusmill\0{schema}\0{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)
