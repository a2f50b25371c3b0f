"""Where corpusmill keeps its local state (`.corpusmill/`, moved by CORPUSMILL_HOME)."""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    return Path(os.environ.get("CORPUSMILL_HOME") or ".corpusmill").resolve()


def runs_dir() -> Path:
    return home() / "runs"


def pgdata_dir() -> Path:
    return home() / "pg"


def logs_dir() -> Path:
    """Tracebacks of internal errors (`corpusmill` exit 4), one file each."""
    return home() / "logs"
