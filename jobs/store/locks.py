"""One writer per collection: a session advisory lock per collection, so two runs of one collection —
from two shells or two machines — never interleave commits; and a fence, so a run that lost the lock
cannot commit after another run took it.

A session lock is released when its session ends: the store closes, or its connection dies (the
server-side keepalives of jobs.store.connection bound how long a dead client's lock lingers). After a
reconnect the new session takes its locks again. Keys come from jobs.store.names.lock_key.

The lock is held by the driver's session, but the commits are made by writer tasks on their own
connections, so the lock alone does not stop a run whose driver lost it: its writers would go on.
The guarantee comes from the owner token (`collection_owners`, migration 010): taking the lock writes a
fresh token for the collection (take_lease), every writer's commit checks it inside its own transaction
(check_lease), and a driver watches it (LeaseWatch). So once a second run holds the lock and has
written its token, no commit of the first lands: a commit in flight finishes before the new token is
written, any later one raises OwnershipLost, and the first run's driver stops within seconds with one
line.

Commits and the token's writer meet on a transaction advisory lock (fence_key): each commit takes it
shared, the writer of a new token exclusive. The owner row's own lock would not do alone: PostgreSQL
lets a new FOR SHARE locker join the row's lockers while an UPDATE waits, so the overlapping commits of
several writers could hold a takeover off until the old run had committed everything. Lock requests
in PostgreSQL's lock manager queue behind a waiting conflicting request, so once the new owner asks,
the old run's next commits wait for its token and then see it. The commits still lock the row FOR
SHARE, for a writer of a version without the advisory lock.
"""

from __future__ import annotations

import _thread
import ctypes
import logging
import signal
import threading
import time
import uuid
from collections.abc import Callable

import psycopg
from psycopg import sql

from jobs.errors import UserError
from jobs.store.connection import connect, reconnecting
from jobs.store.names import lock_key

log = logging.getLogger(__name__)


class CollectionBusy(UserError, RuntimeError):
    """Another run holds the collection's write lock."""


class OwnershipLost(CollectionBusy):
    """Another run took the collection (its lock and owner token) from this one: this run commits nothing more."""


def _owners(schema: str) -> sql.Composed:
    return sql.Identifier(schema, "collection_owners")


def fence_key(schema: str, collection: str) -> tuple[int, int]:
    """The fence's transaction advisory lock: the collection's lock key split in two signed 32-bit
    halves. PostgreSQL keeps two-key advisory locks apart from one-key ones, so it never meets the
    collection's session lock (lock_key)."""
    key = lock_key(schema, collection) & 0xFFFFFFFFFFFFFFFF
    return tuple(half - (1 << 32) if half >= 1 << 31 else half for half in (key >> 32, key & 0xFFFFFFFF))


def take_lease(conn: psycopg.Connection, schema: str, collection: str, holder: str) -> str:
    """Make this run the collection's owner (call with its lock held): a new token, committed. Waits for the
    commits of an earlier owner that are in flight; those that begin meanwhile wait for the new token."""
    token = uuid.uuid4().hex
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", fence_key(schema, collection))
        conn.execute(sql.SQL("INSERT INTO {} (collection, token, holder) VALUES (%s, %s, %s) ON CONFLICT "
                             "(collection) DO UPDATE SET token = EXCLUDED.token, holder = EXCLUDED.holder, "
                             "taken_at = now()").format(_owners(schema)), (collection, token, holder[:200]))
    return token


def lease(conn: psycopg.Connection, schema: str, collection: str) -> tuple[str, str] | None:
    """(token, holder) of the collection's owner, if any."""
    row = conn.execute(sql.SQL("SELECT token, holder FROM {} WHERE collection = %s").format(_owners(schema)),
                       (collection,)).fetchone()
    return (row[0], row[1]) if row else None


def check_lease(conn: psycopg.Connection, schema: str, collection: str, token: str) -> None:
    """Inside a commit's transaction: go on only while `token` owns the collection, and keep a new owner
    from taking it until this transaction ends. Raises OwnershipLost naming the new owner."""
    conn.execute("SELECT pg_advisory_xact_lock_shared(%s, %s)", fence_key(schema, collection))
    row = conn.execute(sql.SQL("SELECT token, holder FROM {} WHERE collection = %s FOR SHARE").format(
        _owners(schema)), (collection,)).fetchone()
    if row is None or row[0] != token:
        raise OwnershipLost(lost_message(collection, row[1] if row else None))


def lost_message(collection: str, holder: str | None) -> str:
    return (f"{holder or 'another run'} took collection {collection!r} from this run, which commits nothing more; "
            "what it committed before is kept")


class LeaseWatch:
    """The driver's side of the fence: a thread that reads the owner token every `every` seconds on a
    connection of its own and, once another run owns the collection (`lost` says why), stops the run's
    work within seconds instead of letting it work on for writers that can no longer commit: it calls the
    cancels registered with `on_lost` (a Ray job's: jobs.ray_session.JobCancel kills its actors and
    tasks), and where none had anything running, interrupts the main thread (KeyboardInterrupt there:
    a run in this process; interrupt_main). Until the run leaves the watch it does so again every
    `REPEAT` seconds: an interrupt that lands in a finalizer is dropped. A database it cannot reach is not
    a loss: the writers and the driver's own reconnects decide that."""

    REPEAT = 10.0

    def __init__(self, url: str, schema: str, collection: str, token: str, every: float = 2.0):
        self.url, self.schema, self.collection, self.token, self.every = url, schema, collection, token, every
        self.lost: str | None = None
        self._cancels: list[Callable[[str], bool]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="corpusmill-lease", daemon=True)

    def __enter__(self) -> LeaseWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def on_lost(self, cancel: Callable[[str], bool]) -> None:
        """`cancel(message)`, called once the collection is lost, stops work in progress and returns whether
        there was any."""
        self._cancels.append(cancel)

    def _run(self) -> None:
        conn = None
        while not self._stop.wait(self.every):
            try:
                conn = conn or connect(self.url, f"corpusmill lease {self.collection}"[:63])
                now = lease(conn, self.schema, self.collection)
            except psycopg.Error:
                if conn is not None:
                    conn.close()
                conn = None
                continue
            if now is not None and now[0] != self.token:
                self.lost = lost_message(self.collection, now[1])
                log.error("%s; stopping", self.lost)
                break
        if conn is not None:
            conn.close()
        while self.lost is not None:
            self._stop_work()
            if self._stop.wait(self.REPEAT):
                break

    def _stop_work(self) -> None:
        cancelled = False
        for cancel in list(self._cancels):
            try:
                cancelled = bool(cancel(self.lost)) or cancelled
            except Exception:  # a cancel that fails must not keep the main thread from being told
                log.warning("could not cancel the run's work", exc_info=True)
        if not cancelled:
            interrupt_main()


def interrupt_main() -> None:
    """KeyboardInterrupt in the main thread, at its next Python instruction. A process started with SIGINT
    ignored (a shell script's `cmd &`, nohup, some service managers) has no Python handler for it, and
    there `_thread.interrupt_main` does nothing: the exception is then set on the main thread directly."""
    if callable(signal.getsignal(signal.SIGINT)):
        _thread.interrupt_main()
        return
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(threading.main_thread().ident),
                                               ctypes.py_object(KeyboardInterrupt))


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


def retake(conn: psycopg.Connection, held: dict[str, int], schema: str | None = None,
           tokens: dict[str, str] | None = None) -> None:
    """Take the locks `held` (collection -> key) again on a new session, after the old one died with
    them. One that another run took meanwhile (it holds the lock now, or held it and wrote its owner
    token before letting go) leaves `held` and raises CollectionBusy: this run must stop writing."""
    for collection, key in list(held.items()):
        if not try_lock(conn, key):
            held.pop(collection)
            raise CollectionBusy(f"while this run reconnected, {holder(conn, key)} took the write lock "
                                 f"of collection {collection!r}; this run stops")
        token = (tokens or {}).get(collection)
        now = lease(conn, schema, collection) if token and schema else None
        if now is not None and now[0] != token:
            unlock(conn, key)
            held.pop(collection)
            raise OwnershipLost(lost_message(collection, now[1]))


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


class CollectionLocks:
    """PgStore's share of the above: the collection's lock and owner token as the driver's store takes
    them. A mixin, as jobs/store/runs.py is: it needs the store's connection (`self.conn`), its schema,
    schema-qualified names (`self._t`), `self._locks` and `self.owner_tokens` (which a reconnect takes
    again, `retake`) and `self.connection_lost()`."""

    def _lock_key(self, collection: str) -> int:
        return lock_key(self.schema, collection)

    @reconnecting
    def lock_collection(self, collection: str, holder: str, wait_seconds: float = 0.0) -> None:
        """Take the collection's write lock (a session advisory lock, released when this store closes or
        its connection dies) so two ingests — from two shells or two machines — never interleave commits.
        Held by another run: wait up to `wait_seconds`, then raise CollectionBusy naming that run."""
        key = self._lock_key(collection)
        self.conn.execute("SELECT set_config('application_name', %s, false)", (holder[:63],))
        self.application_name = holder  # a reconnect presents itself the same way
        wait_for_lock(self.conn, key, collection, wait_seconds)
        self._locks[collection] = key
        self.owner_tokens[collection] = take_lease(self.conn, self.schema, collection, holder)
        # Rows an earlier run staged (jobs/store/writers.py) are only ever assembled under that run's id, so a
        # killed run's would stay for good; under the lock no other run of the collection is staging.
        self.conn.execute(sql.SQL("DELETE FROM {} WHERE collection = %s").format(self._t("staged_rows")), (collection,))
        # Likewise a run still `running` was killed (kill -9, a machine lost) before it could record its end:
        # aborted (its end unknown, so no finished_at), as `status` shows it; a rerun of its id runs again.
        self.conn.execute(sql.SQL("UPDATE {} SET status = 'aborted' WHERE collection = %s AND status = 'running'").format(
            self._t("runs")), (collection,))

    def owner_token(self, collection: str) -> str | None:
        """This run's owner token of `collection` (lock_collection made it): what its writers commit under."""
        return self.owner_tokens.get(collection)

    def unlock_collection(self, collection: str) -> None:
        key = self._locks.pop(collection, None)
        if key is not None and not self.connection_lost():
            unlock(self.conn, key)

    def lock_holder(self, collection: str) -> str:
        """Who holds the collection's lock, in words: the holder's application_name (`corpusmill ingest
        <run_id>`), its client address and since when."""
        return holder(self.conn, self._lock_key(collection))
