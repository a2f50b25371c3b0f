"""jobs/sources/uris.py: schemes, local paths, joins, recorded roots, and credentials in a URI."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.sources.uris import check_uri, is_remote, join, normalize_root, scheme_of


def test_schemes_local_paths_and_joins():
    assert scheme_of("s3://b/p") == "s3" and scheme_of("gs://b") == "gs" and scheme_of("abfs://c/p") == "abfs"
    assert scheme_of("/data/notes") is None and scheme_of("file:///data/notes") is None
    assert is_remote("s3://b/p") and not is_remote("relative/dir")
    with pytest.raises(ValueError, match="unsupported URI scheme 'ftp'"):
        scheme_of("ftp://host/x")
    assert join("s3://b/runs/", "r1") == "s3://b/runs/r1"
    assert join("/tmp/runs", "r1") == "/tmp/runs/r1"
    assert normalize_root("s3://b/p/") == "s3://b/p" and normalize_root("file:///x") == "file:///x"
    assert Path(normalize_root("rel")).is_absolute()


def test_credentials_in_a_uri_are_refused_without_echoing_them():
    with pytest.raises(ValueError) as err:
        check_uri("s3://AKIAXX:hunter2@bucket/prefix")
    assert "hunter2" not in str(err.value) and "AKIAXX" not in str(err.value)
    # A scheme corpusmill does not read is refused before the credentials are looked at: not echoed either.
    with pytest.raises(ValueError, match="unsupported URI scheme 'https'") as err:
        scheme_of("https://bob:hunter2@host/notes")
    assert "hunter2" not in str(err.value) and "bob" not in str(err.value)
