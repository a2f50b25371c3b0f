"""Stable identifiers: same input and same config give the same ids on every run and machine."""

from __future__ import annotations

import hashlib


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def doc_id(collection: str, source_path: str) -> str:
    return sha256_text(f"{collection}\0{source_path}")[:24]


def chunk_id(collection: str, locator: str, text_sha256: str, fingerprint: str) -> str:
    """`locator` says where the chunk sits: `{source_path}##{heading path}#{n}` for Markdown (n counts
    chunks under the same heading path), `{source_path}##{sheet}#{row}` for Excel. Hashed with the
    normalized text and the pipeline fingerprint; the collection keeps ids unique across collections."""
    return sha256_text(f"{collection}\0{locator}\0{text_sha256}\0{fingerprint}")[:32]
