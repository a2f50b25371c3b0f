"""Walk the input roots and describe each file: relative path, type, size, sha256."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from jobs.sources.globs import matches

# .csv rows go through the Excel path; .xls is accepted only to be refused with a conversion hint.
SOURCE_TYPES = {".md": "markdown", ".markdown": "markdown", ".xlsx": "excel", ".xlsm": "excel", ".csv": "excel",
                ".xls": "excel"}


@dataclass(frozen=True)
class SourceFile:
    source_path: str  # relative to its input root, POSIX separators: the document's identity
    abs_path: str
    source_type: str
    size_bytes: int
    content_sha256: str


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def _walk(root: Path) -> Iterator[Path]:
    # Sorted so that plans, block order and therefore logs are the same on every run.
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            yield Path(dirpath) / name


def discover(roots: list[Path], include: list[str], exclude: list[str]) -> list[SourceFile]:
    """Every matching file under `roots`. Two roots holding the same relative path is an error,
    since the relative path is the document's identity in the store."""
    if not roots:
        raise ValueError("no input roots: pass --input DIR or set input.roots in the config")
    found: dict[str, SourceFile] = {}
    for root in roots:
        root = Path(root)
        if not root.is_dir():
            raise FileNotFoundError(f"input root is not a directory: {root}")
        for path in _walk(root):
            rel = path.relative_to(root).as_posix()
            if not matches(rel, include) or matches(rel, exclude):
                continue
            source_type = SOURCE_TYPES.get(path.suffix.lower())
            if source_type is None:
                continue  # an include glob wider than what we can parse
            if rel in found:
                raise ValueError(
                    f"{rel} exists under two input roots ({found[rel].abs_path} and {path}); "
                    "documents are identified by their path relative to the root, so give one root"
                )
            found[rel] = SourceFile(
                source_path=rel,
                abs_path=str(path.resolve()),
                source_type=source_type,
                size_bytes=path.stat().st_size,
                content_sha256=sha256_file(path),
            )
    return list(found.values())
