"""Whether a run the database stopped can be resumed by running the same command again.

A connection lost, a server restarting, a deadlock, another run holding the collection: the next
attempt of the same command gets past them, so the run says "run the same command again to resume".
A server out of a resource it is configured with (SQLSTATE class 53: memory, shared memory for locks,
disk, connections' limits) or a statement over one of its limits (class 54) stops the same batches
the same way each time, so that advice would send the user round in a loop: the message says what
must change instead.
"""

from __future__ import annotations

import errno

import psycopg

# SQLSTATEs and classes a retry gets past: connection exceptions (08), transaction rollback (40:
# deadlock, serialization), operator intervention (57: shutdown, restart, cancel), lock not available,
# too many connections (another client let go of one by then), and the server's own I/O errors (58).
_PASSING_CLASSES = ("08", "40", "57", "58")
_PASSING_STATES = {"55P03", "53300"}

_STUCK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS}

_HINTS = {
    "53200": "the database server ran out of memory (or of shared memory for locks): raise its "
             "shared_buffers/max_locks_per_transaction or give it more memory",
    "53100": "the database server's disk is full: free space on it",
    "53400": "a configured limit of the database server was exceeded: raise it",
}


def resumable(exc: BaseException) -> bool:
    """Whether running the same command again can get past `exc`."""
    if isinstance(exc, psycopg.Error):
        state = exc.sqlstate
        if state is None:  # no answer from the server: the connection went away
            return isinstance(exc, psycopg.OperationalError)
        return state in _PASSING_STATES or state[:2] in _PASSING_CLASSES
    # Lost connections, a busy collection, a worker lost: a rerun gets past them; not a run directory
    # that is full or not writable.
    return not (isinstance(exc, OSError) and exc.errno in _STUCK_ERRNOS)


def what_to_change(exc: BaseException) -> str:
    """For a fault that is not resumable: what must change before the same command can get past it."""
    state = getattr(exc, "sqlstate", None) or ""
    if isinstance(exc, OSError) and exc.errno in _STUCK_ERRNOS:
        return f"free space on, or make writable, {exc.filename or 'the run directory'}"
    if state in _HINTS:
        return _HINTS[state]
    if state.startswith("54"):
        return "a statement exceeded a limit of the database server"
    return "the same command stops the same way until the cause above is fixed"


def advice(exc: BaseException) -> str:
    """The end of a stopped run's message: how to resume, or why the same command would not."""
    if resumable(exc):
        return "run the same command again to resume (the rest are still pending)"
    return f"running the same command again would stop the same way: {what_to_change(exc)}"
