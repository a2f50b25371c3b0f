"""Which PostgreSQL a command talks to: the configured server, else the embedded one.

Its own module, below every job, so that `corpusmill status`, `db` and `search` reach the database
without importing the pipeline (Ray, spaCy, torch, matplotlib come with jobs.ingest).
"""

from __future__ import annotations

from jobs.config import JobConfig
from jobs.store import embedded


def database_url(cfg: JobConfig) -> str:
    """The configured server (flag, DATABASE_URL or config), else the embedded one (started if needed)."""
    if cfg.database.url is not None:
        return cfg.database.url.get_secret_value()
    return embedded.start()
