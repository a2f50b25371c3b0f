"""Where corpora and run outputs live, as written: a local path or an object-store URI.

    s3://bucket/prefix            AWS S3, or any S3-compatible store (MinIO, Ceph) with `storage.endpoint_url`
                                  or AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL
    gs://bucket/prefix            Google Cloud Storage (needs the `gcsfs` package)
    abfs://container/prefix       Azure Blob Storage / ADLS Gen2 (needs the `adlfs` package)
    /any/local/path               the local filesystem, exactly as before

This module handles the text of a URI only (its scheme, joins, the root as recorded); opening a
filesystem for one is jobs/sources/storage.py. A URI carrying credentials is refused.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

from jobs.errors import ConfigError

# URI scheme -> the fsspec protocol that serves it.
SCHEMES = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs", "abfs": "abfs", "abfss": "abfs", "az": "abfs"}


def scheme_of(uri: str | os.PathLike) -> str | None:
    """The object-store scheme of `uri` (`s3`, `gs`, …), or None for a local path (`file://` included)."""
    text = str(uri)
    if "://" not in text:
        return None
    scheme = text.split("://", 1)[0].lower()
    if scheme == "file":
        return None
    if scheme not in SCHEMES:
        raise ConfigError(f"unsupported URI scheme {scheme!r} in {shown(text)!r}: use a local path, "
                         f"{', '.join(s + '://' for s in sorted(SCHEMES))}")
    return scheme


def shown(uri: str) -> str:
    """`uri` as a message may repeat it: without what comes before an `@` in its authority (user, password)."""
    scheme, sep, rest = uri.partition("://")
    if not sep:
        return uri
    authority, slash, path = rest.partition("/")
    return f"{scheme}://{'…@' if '@' in authority else ''}{authority.rpartition('@')[2]}{slash}{path}"


def is_remote(uri: str | os.PathLike) -> bool:
    return scheme_of(uri) is not None


def check_uri(uri: str) -> str:
    """Refuse credentials embedded in a URI (they would end up in logs and the runs table)."""
    text = str(uri)
    if "://" in text:
        parts = urlsplit(text)
        if parts.password is not None or (parts.username is not None and scheme_of(text) == "s3"):
            raise ConfigError(f"credentials in a URI are refused ({parts.scheme}://…@{parts.hostname}): use the "
                             "environment, a profile or storage.secret_file")
    return text


def local_path(uri: str | os.PathLike) -> Path:
    text = str(uri)
    return Path(text[len("file://"):]) if text.startswith("file://") else Path(text)


def normalize_root(root: str | os.PathLike) -> str:
    """A root as recorded (manifests): URIs without a trailing slash, plain local paths made absolute."""
    text = str(root)
    if "://" in text:
        return text.rstrip("/")
    return str(Path(text).resolve())


def join(uri: str, *parts: str) -> str:
    if not is_remote(uri):
        return str(local_path(uri).joinpath(*parts))
    return "/".join([uri.rstrip("/"), *(p.strip("/") for p in parts)])

