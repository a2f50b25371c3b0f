"""Where corpusmill keeps its local state: CORPUSMILL_HOME when set, else the per-user data directory
by the platform's convention (`~/.local/share/corpusmill` on Linux, `~/Library/Application
Support/corpusmill` on macOS, `%LOCALAPPDATA%\\corpusmill` on Windows), so every command finds the same
data from any folder. Under it: `pg/` (the embedded database), `runs/` (Parquet, QA reports), `logs/`."""

from __future__ import annotations

import logging
import os
from functools import cache
from pathlib import Path

log = logging.getLogger(__name__)

LEGACY = ".corpusmill"  # the home's old default, relative to the working directory


def default_home() -> Path:
    from platformdirs import user_data_path  # late: most callers set CORPUSMILL_HOME

    return user_data_path("corpusmill", appauthor=False)


def home() -> Path:
    explicit = os.environ.get("CORPUSMILL_HOME")
    if explicit:
        return Path(explicit).expanduser().resolve()
    path = default_home()
    _tell_of_legacy(path)
    return path


@cache
def _tell_of_legacy(path: Path) -> None:
    """Once per process: data under ./.corpusmill (where earlier versions kept it) is not used any more."""
    legacy = Path(LEGACY).resolve()
    if (legacy / "pg").is_dir() and legacy != path:
        log.warning("data found in %s (the home of earlier versions) is not used: corpusmill's data lives in %s. "
                    "To keep using it, set CORPUSMILL_HOME=%s", legacy, path, legacy)


def runs_dir() -> Path:
    return home() / "runs"


def pgdata_dir() -> Path:
    return home() / "pg"


def logs_dir() -> Path:
    """Tracebacks of internal errors (`corpusmill` exit 4), one file each."""
    return home() / "logs"
