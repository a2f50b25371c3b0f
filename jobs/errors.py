"""Errors the user can fix, as opposed to bugs.

The CLI prints a `UserError` as one line and exits 2; any other exception is a bug (exit 4, the
traceback written under $CORPUSMILL_HOME/logs/). Each subclass also derives from the built-in
exception the same site raised before, so existing `except ValueError` / `except OSError` clauses and
tests keep catching it; pydantic validators may raise `ConfigError`, since it is a ValueError."""

from __future__ import annotations


class UserError(Exception):
    """A usage, configuration, input or environment mistake: the message says what to change."""


class ConfigError(UserError, ValueError):
    """A value the user gave is wrong: a config key, a flag, a file they named (config, manifest, golden set)."""


class NotFoundError(UserError, FileNotFoundError):
    """Something the user named does not exist: a config file, an input root, a run directory, a model."""


class UnreachableError(UserError, ConnectionError):
    """The database (or another service the user pointed at) cannot be reached."""


class NotPermittedError(UserError, PermissionError):
    """The service is reachable but refuses what the job needs; an administrator has to act."""


class NotAvailableError(UserError, RuntimeError):
    """Something the configuration asks for is not on this machine: a GPU, a CUDA build."""


class MissingPackageError(UserError, ImportError):
    """An optional package the input needs is not installed (gcsfs for gs://, adlfs for abfs://)."""
