"""The command line's argument types: numbers and files the user gives, each refused in one line that
says what was expected (argparse's exit 2 for a number; a UserError for a file's content)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from jobs.errors import UserError


def ratio(value: str) -> float:
    """A number 1 or more (NaN refused)."""
    try:
        r = float(value)
    except ValueError:
        r = 0.0
    if not r >= 1:  # NaN too
        raise argparse.ArgumentTypeError(f"expected a number 1 or more, got {value!r}")
    return r


def positive_int(value: str) -> int:
    """A whole number 1 or more."""
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number 1 or more, got {value!r}")
    return n


def seconds(value: str) -> float:
    """A duration in seconds: a finite number, 0 or more."""
    try:
        s = float(value)
    except ValueError:
        s = float("nan")
    if not math.isfinite(s) or s < 0:
        raise argparse.ArgumentTypeError(f"expected seconds, 0 or more, got {value!r}")
    return s


def text_file(path: str, what: str) -> str:
    """A UTF-8 text file the user named; one that is not is the user's to fix (exit 2)."""
    try:
        return Path(path).read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UserError(f"{what} {path} is not UTF-8 text (byte {exc.start}): save it as UTF-8") from None
