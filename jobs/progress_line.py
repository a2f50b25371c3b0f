"""How a run shows its write progress: one line redrawn in place on a terminal, a log line at intervals
off one (a file, a pipe, a CI log).

On a terminal the line is the last thing on the screen: whatever else the run prints while it is shown
(log records, Python warnings, Ray's lines from its workers) goes through `_Console`, which clears the
line, writes the text and draws the line again below it, so the two never garble each other. Output
that bypasses Python (a C++ library writing to the file descriptor) cannot be caught this way; it can
leave a part of one redrawn line above it.
"""

from __future__ import annotations

import logging
import shutil
import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

log = logging.getLogger("jobs.store.writers")  # the logger the write progress has always used

TERMINAL_SECONDS = 1.0  # how often the line on a terminal is redrawn
CLEAR = "\r\x1b[K"  # carriage return, then erase to the end of the line


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


class Rates:
    """Vectors per second and the time left, from samples of (documents settled, vectors) over time.
    Both are measured from the first sample that saw a commit: the time before it (starting Ray, loading
    models) says nothing about how fast documents go in, and would make the first estimates too long.
    Where a sample also gives the work as (bytes of the documents settled, bytes of all of them), the time
    left is the bytes left at the rate bytes settle: a corpus of notes and a few large workbooks would
    otherwise show an ETA of seconds that grows for minutes while the workbooks are the last ones left."""

    def __init__(self, total: int):
        self.total = total
        self._first: tuple[float, int, int, int] | None = None  # (time, documents, vectors, bytes) at the first commit

    def update(self, now: float, settled: int, vectors: int,
               work: tuple[int, int] | None = None) -> tuple[float | None, float | None]:
        """(vectors/s, seconds left); None while unknown."""
        if self._first is None:
            if settled:
                self._first = (now, settled, vectors, work[0] if work else 0)
            return None, None
        t0, d0, v0, b0 = self._first
        elapsed = now - t0
        if elapsed <= 0 or settled <= d0:
            return None, None
        rate = (vectors - v0) / elapsed
        if work is not None and work[0] > b0:
            return rate, max(0.0, (work[1] - work[0]) * elapsed / (work[0] - b0))
        return rate, max(0.0, (self.total - settled) * elapsed / (settled - d0))


def progress_text(done: int, failed: int, total: int, vectors: int, rate: float | None, left: float | None) -> str:
    """`committed 12/40 documents (1 failed) · 340 chunks · 85 vectors/s · ETA 12 s`"""
    parts = [f"committed {done + failed}/{total} documents" + (f" ({failed} failed)" if failed else ""),
             f"{vectors} chunks"]
    if rate is not None:
        parts.append(f"{rate:.0f} vectors/s")
    if left is not None and done + failed < total:
        parts.append(f"ETA {_duration(left)}")
    return " · ".join(parts)


class _Console:
    """A text stream in front of the terminal's stream: each write first clears the progress line, and
    a write that ends a line draws it again."""

    def __init__(self, real: TextIO, line: ProgressLine):
        self._real, self._line = real, line

    def write(self, text: str) -> int:
        with self._line.lock:
            if self._line.shown:
                self._line.erase()
            n = self._real.write(text)
            if text.endswith("\n"):
                self._line.draw()
            return n

    def flush(self) -> None:
        self._real.flush()

    def __getattr__(self, name: str):  # isatty, fileno, encoding … of the real stream
        return getattr(self._real, name)


class ProgressLine:
    """The display of one run's progress. `live`: redraw one line on `stream` (default: whether stderr is a
    terminal); else log a line every `every` seconds when the counts moved (and at least every
    `quiet_lines` × `every` seconds when they did not, so a long wait still shows the run is alive)."""

    def __init__(self, total: int, every: float = 10.0, live: bool | None = None, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic, quiet_lines: int = 6):
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self.total, self.every, self.clock, self.quiet_lines = total, every, clock, quiet_lines
        self.tick = TERMINAL_SECONDS if self.live else every  # how often the caller should sample
        self.lock = threading.RLock()
        self.shown, self.text = False, ""
        self._rates = Rates(total)
        self._last: tuple[int, int, int] | None = None
        self._quiet = 0
        self._swapped: list[tuple[object, str, object]] = []

    # ---- on a terminal: one line, redrawn --------------------------------------------------------
    def extend(self, more: int) -> None:
        """`more` documents to count towards the total (a further round of the same run)."""
        self.total += more
        self._rates.total += more

    def __enter__(self) -> ProgressLine:
        if self.live:
            self._capture()
        return self

    def __exit__(self, *exc) -> None:
        with self.lock:
            if self.shown:
                self.erase()
            for owner, attr, value in reversed(self._swapped):
                setattr(owner, attr, value)
            self._swapped.clear()

    def _capture(self) -> None:
        """Route the process's other output through _Console while the line is shown: sys.stderr and
        sys.stdout where they are this terminal, and the logging handlers that hold the stream itself."""
        screen = {id(self.stream)} | ({id(sys.stdout)} if sys.stdout.isatty() else set())
        for handler in _stream_handlers():
            if id(handler.stream) in screen:
                self._swap(handler, "stream", _Console(handler.stream, self))
        for name in ("stderr", "stdout"):
            if id(getattr(sys, name)) in screen:
                self._swap(sys, name, _Console(getattr(sys, name), self))

    def _swap(self, owner: object, attr: str, value: object) -> None:
        self._swapped.append((owner, attr, getattr(owner, attr)))
        setattr(owner, attr, value)

    def erase(self) -> None:
        self.stream.write(CLEAR)
        self.stream.flush()  # before text that goes to another stream of the same terminal (stdout)
        self.shown = False

    def draw(self) -> None:
        if self.text:
            width = shutil.get_terminal_size((100, 20)).columns - 1
            self.stream.write(CLEAR + self.text[:width])
            self.stream.flush()
            self.shown = True

    # ---- both ---------------------------------------------------------------------------------------
    def update(self, done: int, failed: int, vectors: int, work: tuple[int, int] | None = None) -> None:
        """A sample: documents committed and failed, vectors, and optionally the work (Rates)."""
        rate, left = self._rates.update(self.clock(), done + failed, vectors, work)
        text = progress_text(done, failed, self.total, vectors, rate, left)
        if self.live:
            with self.lock:
                self.text = text
                self.draw()
            return
        moved = (done, failed, vectors) != self._last
        self._quiet = 0 if moved else self._quiet + 1
        if moved or self._quiet >= self.quiet_lines:
            self._last, self._quiet = (done, failed, vectors), 0
            log.info("%s", text)

    def finish(self, done: int, failed: int, vectors: int, work: tuple[int, int] | None = None) -> None:
        """Where the run's writes ended, as one log line in either mode (on a terminal, in place of the line)."""
        rate, left = self._rates.update(self.clock(), done + failed, vectors, work)
        with self.lock:
            self.text = ""  # nothing to draw again below the last line
            if self.shown:
                self.erase()
        log.info("%s", progress_text(done, failed, self.total, vectors, rate, left))


def _stream_handlers() -> list[logging.StreamHandler]:
    loggers = [logging.getLogger()] + [lg for lg in logging.Logger.manager.loggerDict.values()
                                        if isinstance(lg, logging.Logger)]
    return [h for lg in loggers for h in lg.handlers
            if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)]
