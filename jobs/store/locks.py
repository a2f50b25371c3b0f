"""One writer per collection: a session advisory lock per collection, so two runs of one collection —
from two shells or two machines — never interleave commits.

A session lock is released when its session ends: the store closes, or its connection dies (the
server-side keepalives of jobs.store.connection bound how long a dead client's lock lingers). After a
reconnect the new session takes its locks again. Keys come from jobs.store.names.lock_key.
"""

from __future__ import annotations

import logging
import time

import psycopg

from jobs.errors import UserError

log = logging.getLogger(__name__)


class CollectionBusy(UserError, RuntimeError):
    """Another run holds the collection's write lock."""


def try_lock(conn: psycopg.Connection, key: int) -> bool:
    return conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]


def wait_for_lock(conn: psycopg.Connection, key: int, collection: str, wait_seconds: float) -> None:
    """Take `collection`'s lock `key`. Held by another run: wait up to `wait_seconds`, then raise
    CollectionBusy naming that run."""
    deadline, told = time.monotonic() + wait_seconds, False
    while not try_lock(conn, key):
        other = holder(conn, key)
        if time.monotonic() >= deadline:
            raise CollectionBusy(
                f"collection {collection!r} is being written by {other}; wait for it to finish "
                "(or set database.lock_wait_seconds to wait), or use another --collection")
        if not told:
            log.warning("collection %r is being written by %s; waiting up to %g s", collection, other, wait_seconds)
            told = True
        time.sleep(min(1.0, max(0.05, deadline - time.monotonic())))


def unlock(conn: psycopg.Connection, key: int) -> None:
    conn.execute("SELECT pg_advisory_unlock(%s)", (key,))


def retake(conn: psycopg.Connection, held: dict[str, int]) -> None:
    """Take the locks `held` (collection -> key) again on a new session, after the old one died with
    them. One that another run took meanwhile leaves `held` and raises CollectionBusy: this run must
    stop writing."""
    for collection, key in list(held.items()):
        if not try_lock(conn, key):
            held.pop(collection)
            raise CollectionBusy(f"while this run reconnected, {holder(conn, key)} took the write lock "
                                 f"of collection {collection!r}; this run stops")


def holder(conn: psycopg.Connection, key: int) -> str:
    """Who holds lock `key`, in words: the holder's application_name (`corpusmill ingest <run_id>`), its
    client address and since when."""
    row = conn.execute(
        "SELECT a.application_name, a.client_addr::text, a.client_hostname, a.pid, a.backend_start "
        "FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' "
        "AND l.granted AND l.classid::bigint = %s AND l.objid::bigint = %s AND l.objsubid = 1",
        ((key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF)).fetchone()
    if row is None:
        return "another process (it has just finished)"
    name, addr, host, pid, since = row  # another role's session shows NULLs but its pid
    where = host or addr or "this server's host (local socket)"
    when = f", connected {since:%Y-%m-%d %H:%M:%S %Z}" if since is not None else ""
    return (f"{name or 'a process'} (server pid {pid}, from {where}{when}; if that process is gone, "
            f"`SELECT pg_terminate_backend({pid})` frees the lock)")
