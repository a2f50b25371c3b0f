"""Glob patterns over relative POSIX paths, with `**` meaning any number of directories.

Python 3.11's fnmatch lets `*` cross `/` and pathlib's match has no `**`, so patterns are compiled
to regexes here, once, with the same meaning on every filesystem.
"""

from __future__ import annotations

import re
from functools import lru_cache


@lru_cache(maxsize=256)
def compile_glob(pattern: str) -> re.Pattern[str]:
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")  # zero or more whole directories
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")  # trailing `**`: anything below
            i += 2
        elif c == "*":
            out.append("[^/]*")  # within one path segment
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(c))
            i += 1
    return re.compile("".join(out) + r"\Z")


def matches(rel_path: str, patterns: list[str]) -> bool:
    return any(compile_glob(p).match(rel_path) for p in patterns)
