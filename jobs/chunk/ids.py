"""Stable identifiers: same input and same config give the same ids on every run and machine."""

from __future__ import annotations

import hashlib


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def doc_id(collection: str, source_path: str) -> str:
    return sha256_text(f"{collection}\0{source_path}")[:24]


def chunk_id(collection: str, source_path: str, seq: int, text_sha256: str, fingerprint: str) -> str:
    return sha256_text(f"{collection}\0{source_path}\0{seq}\0{text_sha256}\0{fingerprint}")[:32]
