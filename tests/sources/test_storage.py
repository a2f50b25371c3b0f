"""jobs/sources/storage.py: storage options and credentials (secret files, the standard AWS variables)."""

from __future__ import annotations

import pickle

import pytest

from jobs.sources.storage import StorageOptions, read_secret_file


def test_secret_file_yaml_and_ini_values_stay_masked(tmp_path):
    yml = tmp_path / "s.yaml"
    yml.write_text("aws_access_key_id: AKIAVISIBLE\naws_secret_access_key: sup3rs3cret\n")
    secrets = read_secret_file(yml)
    assert secrets["aws_secret_access_key"].get_secret_value() == "sup3rs3cret"
    ini = tmp_path / "credentials"
    ini.write_text("[default]\naws_access_key_id = A1\naws_secret_access_key = s1\n[ci]\naws_access_key_id = A2\n"
                   "aws_secret_access_key = s2\n")
    assert read_secret_file(ini, "ci")["aws_secret_access_key"].get_secret_value() == "s2"

    class Storage:  # the config section's shape
        endpoint_url, region, profile, anonymous, secret_file = "http://127.0.0.1:1", None, None, False, yml

    opts = StorageOptions.from_config(Storage)
    # What travels to Ray workers (pickled) and what a log line or traceback would show.
    assert "sup3rs3cret" not in repr(opts) and "sup3rs3cret" not in str(opts)
    assert pickle.loads(pickle.dumps(opts)) == opts
    kw = opts.fsspec_kwargs("s3")
    assert (kw["key"], kw["secret"], kw["endpoint_url"]) == ("AKIAVISIBLE", "sup3rs3cret", "http://127.0.0.1:1")

    bad = tmp_path / "bad.yaml"
    bad.write_text("aws_secret_acess_key: typo-value\n")
    with pytest.raises(ValueError, match="unknown keys") as err:
        read_secret_file(bad)
    assert "typo-value" not in str(err.value)


def test_endpoint_from_the_standard_aws_variables(monkeypatch):
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://minio.local:9000")
    assert StorageOptions().fsspec_kwargs("s3")["endpoint_url"] == "http://minio.local:9000"
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://ceph.local:7480")
    assert StorageOptions().fsspec_kwargs("s3")["endpoint_url"] == "http://ceph.local:7480"
    assert StorageOptions(endpoint_url="http://cfg:1").fsspec_kwargs("s3")["endpoint_url"] == "http://cfg:1"
    assert StorageOptions(anonymous=True).fsspec_kwargs("s3")["anon"] is True
