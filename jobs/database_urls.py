"""The database URL as a user gives it: its scheme checked, or read from a secret file. The errors never
repeat a URL: it holds the password."""

from __future__ import annotations

from pathlib import Path

from jobs.errors import ConfigError


def check_url_scheme(url: str) -> None:
    """A database URL of another scheme (mysql://, https://) is refused naming only its scheme: the rest
    holds the password. libpq's own `key=value` form has none and passes."""
    scheme, sep, _ = url.partition("://")
    if sep and scheme.lower() not in ("postgresql", "postgres"):
        raise ConfigError(f"the database URL is a {scheme}:// URL: give postgresql://USER:PASSWORD@HOST:PORT/DB "
                          "in --database-url / DATABASE_URL")


def read_url_file(path: Path) -> str:
    """The database URL from a secret file: how a job submitted to a cluster gets it without the URL
    passing through the command line, the job's environment or its logs. The error names the file,
    never its content."""
    try:
        url = path.read_text(encoding="utf-8").strip()
    except OSError as e:
        raise ConfigError(f"cannot read the database URL file {path}: {e.strerror}") from None
    if not url.startswith(("postgresql://", "postgres://")):
        raise ConfigError(f"the database URL file {path} does not hold a postgresql:// URL")
    return url
