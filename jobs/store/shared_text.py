"""Text shared across documents, stored once per collection: corpus-level boilerplate.

Docs sites repeat blocks across pages: the same inherited-options block on every Hugo command page,
one long C# host sample carried by four PowerShell pages, a page included under two paths. Embedded
on every page, each copy is a near-duplicate neighbour of the others, and a prompt's top-k spends its
slots on one passage several times. So a chunk whose text (`text_sha256`) another document of the
collection already holds is not stored again: the first document committed with it holds it, each later
one records its copy in the `shared_text` table (migration 004) instead of a second vector.

The table is the corpus-level count, kept in the database so that incremental runs see the same
holders as a full one. When the document holding a text changes or leaves and no other one holds
it, the documents that recorded a copy are marked `pending` (with no run): the run that let the text
go re-chunks them before it reports success (jobs/ingest.py, its re-homing rounds), and one of them
holds it; a run stopped before then leaves them to the next one.

A within-document repeat is the chunker's business (jobs/markdown/windows.py drops repeated
paragraphs); the same text twice in one document is kept here, as before.
"""

from __future__ import annotations

import logging

import pyarrow as pa
from psycopg import sql

log = logging.getLogger(__name__)


def ensure_hash_index(conn, table: sql.Composed, index: sql.Identifier) -> None:
    """The text_sha256 index each commit's holder lookup needs (created once; cheap to re-check)."""
    conn.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (text_sha256)").format(index, table))


# The advisory-lock class of texts being committed (the two-int4 key space, apart from the collections'
# bigint locks): parallel writers committing one text serialize on it, so exactly one becomes its holder.
TEXT_LOCK_CLASS = 0x636D7478  # "cmtx"
# A text's lock is its hash bucket's, one of TEXT_LOCK_BUCKETS: a transaction takes at most this many
# locks, however many texts it commits. One lock per text filled the server's lock table (sized
# max_locks_per_transaction × backends, 64 × ~120 by default, with some slack) with one commit of
# 12,000-16,000 distinct texts: "out of shared memory". At 512 a writer the table holds 15 writers'.
# Two commits with a bucket in common wait for each other; a commit takes its locks after its COPY
# (copy_stored), so what waits is the short check-and-record at its end, not the COPY.
TEXT_LOCK_BUCKETS = 512


def lock_buckets(hashes) -> list[int]:
    """The sorted lock keys of these texts (hex sha256s): their buckets."""
    return sorted({int(h[:8], 16) % TEXT_LOCK_BUCKETS for h in hashes if h})


def lock_texts(conn, hashes) -> None:
    """Transaction-level locks on these texts' buckets, taken in one order, so two transactions locking
    overlapping sets wait for each other instead of deadlocking. Released at commit."""
    keys = lock_buckets(hashes)
    if keys:
        # unnest keeps the array's (sorted) order, and the server runs every call before it answers.
        conn.execute("SELECT pg_advisory_xact_lock(%s, k) FROM unnest(%s::int4[]) AS k", (TEXT_LOCK_CLASS, keys))


# A commit's text hashes go to the server as one comma-joined string, split there (string_to_array): a
# list parameter is dumped element by element in Python, which for a commit's thousands of hashes cost
# the writer more than the server's index probes. A hash is hex, so the comma is never part of one.
HASHES = "string_to_array(%s, ',')"


def hash_list(hashes) -> str:
    """Hashes (hex sha256s) as the one parameter HASHES splits."""
    return ",".join(hashes)


def held_query(table: sql.Composed) -> sql.Composed:
    """Which of these texts (%s: hash_list) a document other than these (%s: doc ids) holds: through
    the text_sha256 index, a few probes per commit, whatever the collection's size."""
    return sql.SQL("SELECT DISTINCT text_sha256 FROM {} WHERE text_sha256 = ANY(" + HASHES
                   + ") AND doc_id <> ALL(%s)").format(table)


def stored_mask(conn, table: sql.Composed, doc_ids: list[str], hashes: list[str],
                dropped: set[str] | frozenset = frozenset(), *, lock: bool = True) -> list[bool]:
    """For chunk rows (their documents and text hashes, in commit order), whether each is stored (True)
    or a copy of text another document holds: one committed before, or an earlier document of the same
    commit. The same text twice in one document is kept; rows of the committing documents themselves
    (already in the table when their COPY went first) hold nothing here. Call inside the commit's
    transaction with the committing documents' old chunks already deleted, so "another document" is
    everything left. `dropped`: the hashes of those old chunks, locked with the new ones in one sorted
    call, so a writer that stops holding a text and one that records a copy of it cannot both decide
    before either commits (and leave the text held by nobody). `lock=False`: a guess without locks (the
    COPY's, made before the locked answer that settles it)."""
    distinct = sorted(set(hashes))
    if lock:
        lock_texts(conn, set(distinct) | set(dropped))
    if not hashes:
        return []
    held = {r[0] for r in conn.execute(held_query(table), (hash_list(distinct), sorted(set(doc_ids))))}
    holder: dict[str, str] = {}
    return [h not in held and holder.setdefault(h, d) == d for d, h in zip(doc_ids, hashes)]


def copy_stored(conn, table: sql.Composed, chunks: pa.Table, dropped: set[str], copy) -> list[bool]:
    """COPY the rows of `chunks` (one commit's, with doc_id and text_sha256) that hold their text, by
    `copy(conn, table, rows)`; returns which rows are stored (stored_mask). The COPY goes first, on a
    guess made without locks, so that the text locks are held only for the check that settles it: a
    row the locked check finds another commit now holds is deleted again, a row it finds released
    meanwhile is copied then; both are rare (two commits of one text at the same moment)."""
    of_doc, hashes = chunks.column("doc_id").to_pylist(), chunks.column("text_sha256").to_pylist()
    guess = stored_mask(conn, table, of_doc, hashes, lock=False)
    copy(conn, table, chunks.filter(pa.array(guess, pa.bool_())) if not all(guess) else chunks)
    keep = stored_mask(conn, table, of_doc, hashes, dropped)
    ids = chunks.column("chunk_id").to_pylist()
    late = [c for c, g, k in zip(ids, guess, keep) if g and not k]
    if late:
        conn.execute(sql.SQL("DELETE FROM {} WHERE chunk_id = ANY(%s)").format(table), (late,))
    missing = [k and not g for g, k in zip(guess, keep)]
    if any(missing):
        copy(conn, table, chunks.filter(pa.array(missing, pa.bool_())))
    return keep


def record_copies(conn, registry: sql.Composed, collection: str, doc_id: str, copies: list[dict]) -> None:
    """Replace the document's recorded copies with `copies`."""
    replace_copies(conn, registry, collection, [doc_id], [(doc_id, c["chunk_id"], c["text_sha256"]) for c in copies])


def replace_copies(conn, registry: sql.Composed, collection: str, doc_ids: list[str],
                   copies: list[tuple[str, str, str]]) -> None:
    """Replace the recorded copies of `doc_ids` with `copies`: (doc_id, chunk_id, text_sha256)."""
    conn.execute(sql.SQL("DELETE FROM {} WHERE collection = %s AND doc_id = ANY(%s)").format(registry),
                 (collection, doc_ids))
    if copies:
        with conn.cursor() as cur:
            cur.executemany(sql.SQL(
                "INSERT INTO {} (collection, doc_id, chunk_id, text_sha256) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT DO NOTHING").format(registry), [(collection, *c) for c in copies])


def release(conn, table: sql.Composed, registry: sql.Composed, documents: sql.Composed, collection: str,
            dropped: set[str]) -> list[str]:
    """Texts a document no longer holds (`dropped`: its old hashes not in its new chunks): where no other
    document holds one now, the documents that recorded a copy of it become `pending` with no run, for
    the running ingest's re-homing round (PgStore.released_documents). Returns their source paths."""
    if not dropped:
        return []
    hashes = sorted(dropped)
    still = {r[0] for r in conn.execute(sql.SQL(
        "SELECT DISTINCT text_sha256 FROM {} WHERE text_sha256 = ANY(" + HASHES + ")").format(table),
        (hash_list(hashes),))}
    lost = [h for h in hashes if h not in still]
    if not lost:
        return []
    marked = [r[0] for r in conn.execute(sql.SQL(
        # run_id NULL: released, not a document a run lost (which keeps its run's id).
        "UPDATE {docs} SET status = 'pending', run_id = NULL, updated_at = now() WHERE collection = %s "
        "AND status = 'done' "
        "AND doc_id IN (SELECT doc_id FROM {registry} WHERE collection = %s AND text_sha256 = ANY(" + HASHES + ")) "
        "RETURNING source_path").format(docs=documents, registry=registry), (collection, collection, hash_list(lost)))]
    if marked:
        log.info("%d documents shared text only a replaced or removed document held: marked pending, to be "
                 "re-chunked in this run", len(marked))
    return marked


def counts(conn, registry: sql.Composed, documents: sql.Composed, collection: str) -> dict:
    """Copies recorded for the collection: chunks not stored twice, the distinct texts they repeat, the
    documents that carry at least one, and `whole_copies`: documents with nothing of their own stored,
    every chunk a copy (a page copied or included under another path: real duplication, worth a look)."""
    copies, texts, docs = conn.execute(sql.SQL(
        "SELECT count(*), count(DISTINCT text_sha256), count(DISTINCT doc_id) FROM {} WHERE collection = %s").format(
        registry), (collection,)).fetchone()
    whole = [r[0] for r in conn.execute(sql.SQL(
        "SELECT d.source_path FROM {docs} d WHERE d.collection = %s AND d.status = 'done' AND d.chunk_count = 0 "
        "AND EXISTS (SELECT 1 FROM {registry} r WHERE r.collection = d.collection AND r.doc_id = d.doc_id) "
        "ORDER BY 1").format(docs=documents, registry=registry), (collection,))]
    return {"copies": int(copies), "texts": int(texts), "documents": int(docs), "whole_copies": len(whole),
            "whole_copy_paths": whole[:20]}
