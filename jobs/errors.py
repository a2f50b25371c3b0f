"""Errors the user can fix, as opposed to bugs.

The CLI prints a `UserError` as one line and exits 2; any other exception is a bug (exit 4, the
traceback written under $CORPUSMILL_HOME/logs/). Each subclass also derives from the built-in
exception the same site raised before, so existing `except ValueError` / `except OSError` clauses and
tests keep catching it; pydantic validators may raise `ConfigError`, since it is a ValueError.

Between the two, a `DataFault` is one document's bad content: that document fails and the run goes on.
Inside the pipeline `is_bug` tells a bug from everything else, so a bug stops the run (exit 4) instead of
being recorded against the documents it happened to meet."""

from __future__ import annotations


class Terminated(KeyboardInterrupt):
    """SIGTERM (`kill`, a service manager, a scheduler's time limit): stops a command as Ctrl-C does, so
    that every step that cleans up after an interrupt (a run recorded aborted, Ray's jobs cancelled)
    does so for it too. jobs.cli.main turns it into exit status 143."""


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


class DataFault(ValueError):
    """A document's own content cannot be processed: it fails alone (an error row, a `failed` document
    with the reason) and the run goes on. Readers raise a named subclass for bad input, so that a plain
    ValueError, which our own code raises on a bug, is not mistaken for one (`is_bug`)."""


class NotUtf8Error(DataFault):
    """A text file (Markdown, CSV) whose bytes are not UTF-8."""


class FileRefused(DataFault):
    """A file refused before it is parsed: over a size limit, a legacy or binary format, a zip bomb, a DTD."""


class UnreadableFile(DataFault):
    """A file its parser cannot read (openpyxl on a corrupt workbook, a CSV line the csv module rejects)."""


class InternalError(RuntimeError):
    """A bug caught where it cannot be raised as it is (a stage on a Ray worker, a write task), carried to the
    driver, which stops the run with exit 4. The message names the original exception and where it was raised."""


# Exceptions our code raises only on a bug: a wrong type, a missing key or attribute, a failed assertion, and
# a plain ValueError (pyarrow's ArrowInvalid is one, ArrowTypeError a TypeError). Not among them: data faults
# above, UnicodeError (text Arrow or a codec cannot take), a user's mistake, and what the machine or the
# network does (OSError, MemoryError, RuntimeError from a library, a database error).
_BUG_CLASSES = (TypeError, AttributeError, LookupError, NameError, AssertionError, ValueError)
_NOT_BUGS = (DataFault, UnicodeError, UserError)


def is_bug(exc: BaseException) -> bool:
    """Whether `exc` is a bug in our code rather than a fault of one document's data: a stage re-raises it
    instead of turning it into the document's error row, and the run stops with exit 4."""
    return isinstance(exc, _BUG_CLASSES) and not isinstance(exc, _NOT_BUGS)


def bug_report(exc: BaseException) -> str | None:
    """One line for a bug (`TypeError: message (at file.py:line)`), an InternalError's own message, or None
    when `exc` is not a bug."""
    if isinstance(exc, InternalError):
        return str(exc)
    if not is_bug(exc):
        return None
    at = where(exc)
    return f"{type(exc).__name__}: {str(exc).strip() or repr(exc)}" + (f" (at {at})" if at else "")


def where(exc: BaseException) -> str:
    """`file.py:line` of the innermost frame `exc` was raised in ('' without a traceback)."""
    tb = exc.__traceback__
    if tb is None:
        return ""
    while tb.tb_next is not None:
        tb = tb.tb_next
    return f"{tb.tb_frame.f_code.co_filename.rsplit('/', 1)[-1]}:{tb.tb_lineno}"
