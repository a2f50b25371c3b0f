"""Storage options, credentials and fsspec filesystems: how any process opens a local path or an object store.

Object stores are reached through fsspec filesystems (s3fs, gcsfs, adlfs), the same objects Ray Data and
pyarrow accept. Credentials come from each SDK's standard chain (environment variables, profiles,
instance or workload roles) or from `storage.secret_file`, read once in the driver into SecretStr
values that travel to the Ray workers inside the stage arguments; they are never logged, written to
the runs table, the Parquet files or the QA report, and a URI carrying credentials is refused.
"""

from __future__ import annotations

import configparser
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import SecretStr

from jobs.errors import ConfigError, MissingPackageError, NotFoundError
from jobs.sources.uris import SCHEMES, check_uri, local_path, scheme_of

_PACKAGES = {"s3": "s3fs", "gcs": "gcsfs", "abfs": "adlfs"}
# Keys a secret file may hold, per protocol, and the fsspec argument each becomes.
_SECRET_KEYS = {
    "s3": {"aws_access_key_id": "key", "aws_secret_access_key": "secret", "aws_session_token": "token"},
    "gcs": {"gcs_token": "token"},
    "abfs": {"azure_account_name": "account_name", "azure_account_key": "account_key",
             "azure_sas_token": "sas_token", "azure_connection_string": "connection_string"},
}
ALL_SECRET_KEYS = {k for keys in _SECRET_KEYS.values() for k in keys}


@dataclass(frozen=True)
class StorageOptions:
    """What any process (driver or Ray worker) needs to open a filesystem. The secrets are SecretStr, so
    a repr, a log line or a traceback shows them as '**********'."""

    endpoint_url: str | None = None
    region: str | None = None
    profile: str | None = None
    anonymous: bool = False
    secrets: tuple[tuple[str, SecretStr], ...] = ()

    @classmethod
    def from_config(cls, storage: Any | None) -> StorageOptions:
        """From the config's `storage` section; the secret file (if any) is read here, in the driver."""
        if storage is None:
            return cls()
        secrets = read_secret_file(storage.secret_file, storage.profile) if storage.secret_file else {}
        return cls(endpoint_url=storage.endpoint_url, region=storage.region, profile=storage.profile,
                   anonymous=storage.anonymous, secrets=tuple(sorted(secrets.items())))

    def fsspec_kwargs(self, protocol: str) -> dict[str, Any]:
        kw: dict[str, Any] = {}
        names = _SECRET_KEYS.get(protocol, {})
        secrets = {names[k]: v.get_secret_value() for k, v in self.secrets if k in names}
        if protocol == "s3":
            kw["use_listings_cache"] = False
            endpoint = self.endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
            if endpoint:
                kw["endpoint_url"] = endpoint
            if self.region:
                kw["client_kwargs"] = {"region_name": self.region}
            if self.anonymous:
                kw["anon"] = True
            elif self.profile and not secrets:
                kw["profile"] = self.profile
        elif protocol == "gcs":
            if self.endpoint_url:
                kw["endpoint_url"] = self.endpoint_url
            if self.anonymous:
                kw["token"] = "anon"
        elif protocol == "abfs" and self.anonymous:
            kw["anon"] = True
        kw.update(secrets)
        return kw


def read_secret_file(path: Path | str, profile: str | None = None) -> dict[str, SecretStr]:
    """Credentials from a file: a YAML/JSON mapping of the keys in `_SECRET_KEYS`, or an AWS shared
    credentials file (INI: `[default]` or `[profile]` with aws_access_key_id/aws_secret_access_key)."""
    path = Path(path).expanduser()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise NotFoundError(f"storage.secret_file {path} cannot be read ({exc.strerror})") from None
    if text.lstrip().startswith("["):
        ini = configparser.ConfigParser()
        ini.read_string(text)
        section = profile or "default"
        if section not in ini:
            raise ConfigError(f"storage.secret_file {path} has no [{section}] section")
        data = dict(ini[section])
    else:
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError:
            data = None
        if not isinstance(data, dict):
            raise ConfigError(f"storage.secret_file {path} is neither a YAML/JSON mapping nor an INI credentials file")
    unknown = sorted(set(data) - ALL_SECRET_KEYS)
    if unknown:  # key names only: never the values
        raise ConfigError(f"storage.secret_file {path}: unknown keys {unknown}; expected some of {sorted(ALL_SECRET_KEYS)}")
    return {k: SecretStr(str(v)) for k, v in data.items() if v is not None}


@dataclass(frozen=True)
class Location:
    uri: str  # as the user wrote it, normalised (no trailing slash)
    protocol: str  # fsspec protocol: s3, gcs, abfs, or file
    path: str  # the filesystem's own path: bucket/key for object stores, absolute path locally
    fs: Any  # an fsspec filesystem

    @property
    def local(self) -> bool:
        return self.protocol == "file"


_FS_CACHE: dict[tuple, Any] = {}
_FS_LOCK = threading.Lock()


def filesystem(protocol: str, storage: StorageOptions | None = None) -> Any:
    """An fsspec filesystem for `protocol`, one per process and option set."""
    import fsspec  # late: fsspec and its backends load on first use; local discovery and config checks never need them

    storage = storage or StorageOptions()
    key = (protocol, storage, os.getpid())
    with _FS_LOCK:
        if key not in _FS_CACHE:
            try:
                _FS_CACHE[key] = fsspec.filesystem(protocol, **storage.fsspec_kwargs(protocol))
            except ImportError as exc:
                pkg = _PACKAGES.get(protocol, protocol)
                raise MissingPackageError(f"{protocol}:// needs the {pkg} package: pip install {pkg}") from exc
        return _FS_CACHE[key]


def locate(uri: str | os.PathLike, storage: StorageOptions | None = None) -> Location:
    scheme = scheme_of(uri)
    if scheme is None:
        path = local_path(uri).resolve()
        return Location(str(path), "file", str(path), filesystem("file"))
    text = check_uri(str(uri)).rstrip("/")
    protocol = SCHEMES[scheme]
    path = text.split("://", 1)[1]
    if not path:
        raise ConfigError(f"{uri!r} names no bucket")
    return Location(text, protocol, path, filesystem(protocol, storage))
