"""How a command's exception becomes its exit status and what it prints: a mistake the user can fix is
one line and exit 2; anything else is a bug, exit 4, with its traceback saved for the report; Ctrl-C is
130 and SIGTERM 143."""

from __future__ import annotations

import errno
import platform
import shlex
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from datetime import UTC, datetime

from jobs import PIPELINE_VERSION, __version__
from jobs.errors import InternalError, Terminated, UserError, where
from jobs.home import logs_dir

# A directory the user named that cannot be written, a full or read-only disk: exit 2, not a bug.
_ENVIRONMENT_ERRNOS = {errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EROFS, errno.EDQUOT}


def _one_line(text: str) -> str:
    return "; ".join(line.strip() for line in str(text).splitlines() if line.strip())


def user_error_message(exc: Exception, config_path: Callable[[], str]) -> str | None:
    """The one-line message of a mistake the user can fix (exit 2), or None for a bug (exit 4): a
    UserError, an invalid config (pydantic), a config file that is not YAML (`config_path()` names it).
    Input values are never echoed back: they may be secrets."""
    from pydantic import ValidationError  # late: `corpusmill --help` imports this module and stays light
    from yaml import YAMLError  # late: see above

    if isinstance(exc, UserError):
        return _one_line(str(exc)) or type(exc).__name__
    if isinstance(exc, OSError) and exc.errno in _ENVIRONMENT_ERRNOS:  # a path the user gave: not ours to fix
        return f"{exc.strerror}: {exc.filename}" if exc.filename else _one_line(str(exc))
    if isinstance(exc, ValidationError):
        problems = []
        for e in exc.errors(include_url=False, include_input=False, include_context=False):
            where = ".".join(str(part) for part in e["loc"])
            msg = e["msg"].removeprefix("Value error, ")
            problems.append(f"{where}: {msg}" if where else msg)
        return "invalid configuration: " + _one_line("; ".join(problems))
    if isinstance(exc, YAMLError):  # user files only: the config (template and secret files wrap their own)
        mark, problem = getattr(exc, "problem_mark", None), getattr(exc, "problem", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        return f"{config_path() or 'config'}: not valid YAML ({problem or _one_line(str(exc))}{where})"
    return None


def _redacted(argv: list[str]) -> list[str]:
    """The command line without the database URL's value, however the option was spelled (argparse takes
    any unambiguous prefix: --database, --data=...)."""
    def is_url_option(name: str) -> bool:
        return len(name) >= 3 and "--database-url".startswith(name)

    out, hide = [], False
    for arg in argv:
        name, eq, _ = arg.partition("=")
        if hide:
            out.append("***")
        elif eq and is_url_option(name):
            out.append(f"{name}=***")
        else:
            out.append(arg)
        hide = not eq and is_url_option(arg)
    return out


def internal_error(command: str, verbose: bool, argv: list[str] | None, exc: Exception) -> int:
    """A bug: exit 4 with one line that names the exception and the file and line it was raised at, its
    traceback saved to a timestamped file under $CORPUSMILL_HOME/logs/ (and printed with -v, or when the
    file cannot be written). An InternalError names its own: it carries a bug raised elsewhere (a worker)."""
    tb = "".join(traceback.format_exception(exc))
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    typed = shlex.join(["corpusmill", *_redacted(list(sys.argv[1:] if argv is None else argv))])
    path, problem = logs_dir() / f"internal-error-{stamp}.log", None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("x", encoding="utf-8") as f:
            f.write(f"{typed}\ncorpusmill {__version__}, pipeline {PIPELINE_VERSION}, "
                    f"Python {platform.python_version()}, {stamp}\n\n{tb}")
    except OSError as e:
        problem = e
    detail, at = _one_line(str(exc)), "" if isinstance(exc, InternalError) else where(exc)
    print(f"corpusmill {command}: internal error: {type(exc).__name__}" + (f": {detail}" if detail else "")
          + (f" (at {at})" if at else ""), file=sys.stderr)
    if verbose or problem is not None:
        sys.stderr.write(tb)
    if problem is None:
        print(f"this is a bug in corpusmill; the traceback is in {path}"
              + ("" if verbose else f" (`corpusmill -v {command} …` prints it too)"), file=sys.stderr)
    else:
        print(f"this is a bug in corpusmill; the traceback is above (could not write {path}: {problem})",
              file=sys.stderr)
    return 4


_WRITES = {"ingest", "load", "reembed", "upgrade"}  # what an interrupted one keeps, and how it resumes


def interrupted(command: str, exc: KeyboardInterrupt) -> int:
    """Ctrl-C (130) or SIGTERM (Terminated, 143): one line, which for a command that writes says that
    what it committed stays and how to resume."""
    said = "stopped (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
    if command in _WRITES:
        said += ": committed documents are kept; run the same command again to resume"
    print(said, file=sys.stderr)
    if isinstance(exc, Terminated):
        return 143
    return 130


def terminate_as_interrupt(command: str) -> Callable[[], object]:
    """SIGTERM raises Terminated in the main thread for a command's length, where nothing else handles
    it (the default would end the process at once: a run in this process left `running` for good, its
    work items kept). Ray's driver installs a handler of its own, `sys.exit(15)`: jobs.cli.main takes
    that SystemExit as the same stop. Not for `serve`: uvicorn shuts down on SIGTERM itself, then sends
    it again to the handler it found, and a service manager counts death by that signal as a clean stop
    where it would count exit 143 a failure. Returns what puts the earlier handler back."""
    if command == "serve" or threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return lambda: None

    def terminated(signum, frame):
        raise Terminated

    signal.signal(signal.SIGTERM, terminated)
    return lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL)
