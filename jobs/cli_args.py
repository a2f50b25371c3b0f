"""The command line's argument types: numbers and files the user gives, each refused in one line that
says what was expected (argparse's exit 2 for a number; a UserError for a file's content)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from jobs.errors import UserError


def _number(value: str, convert, ok, expected: str):
    """`value` converted, if `ok` holds for it (a value that does not convert never does), else
    argparse's one-line refusal naming what was `expected`."""
    try:
        number = convert(value)
    except ValueError:
        number = None
    if number is None or not ok(number):
        raise argparse.ArgumentTypeError(f"expected {expected}, got {value!r}")
    return number


def ratio(value: str) -> float:
    """A number 1 or more (NaN refused)."""
    return _number(value, float, lambda r: r >= 1, "a number 1 or more")


def positive_int(value: str) -> int:
    """A whole number 1 or more."""
    return _number(value, int, lambda n: n >= 1, "a whole number 1 or more")


def seconds(value: str) -> float:
    """A duration in seconds: a finite number, 0 or more."""
    return _number(value, float, lambda s: math.isfinite(s) and s >= 0, "seconds, 0 or more")


def text_file(path: str, what: str) -> str:
    """A UTF-8 text file the user named; one that is not is the user's to fix (exit 2)."""
    try:
        return Path(path).read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UserError(f"{what} {path} is not UTF-8 text (byte {exc.start}): save it as UTF-8") from None
