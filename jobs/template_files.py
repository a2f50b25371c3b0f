"""The Excel row-template files of a directory and their digest.

Below the config (which hashes them into the pipeline fingerprint) and the Excel stage (which reads
them), so that neither has to import the other.
"""

from __future__ import annotations

import hashlib
from pathlib import Path


def template_files(directory: Path | str | None) -> list[Path]:
    """The template files of `directory`, sorted: what the Excel stage reads and the fingerprint hashes."""
    if directory is None:
        return []
    path = Path(directory).resolve()
    if not path.is_dir():
        return []
    return sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())


def templates_digest(path: Path | str | None) -> str:
    """The templates' names and contents (not where they are): exactly the files load_templates reads."""
    h = hashlib.sha256()
    for f in template_files(path):
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]
