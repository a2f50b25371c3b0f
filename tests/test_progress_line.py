"""The write progress display: its text, the rates it estimates, one redrawn line on a terminal that
other output does not garble, and log lines at intervals off a terminal."""

import io
import logging
import sys

from jobs.progress_line import CLEAR, ProgressLine, Rates, progress_text


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_text_says_documents_chunks_rate_and_time_left():
    assert progress_text(12, 1, 40, 340, 85.4, 12.2) == \
        "committed 13/40 documents (1 failed) · 340 chunks · 85 vectors/s · ETA 12 s"
    assert progress_text(0, 0, 40, 0, None, None) == "committed 0/40 documents · 0 chunks"
    assert progress_text(40, 0, 40, 900, 50.0, 0.0) == "committed 40/40 documents · 900 chunks · 50 vectors/s"
    assert progress_text(1, 0, 900, 9, 1.0, 3725).endswith("ETA 1 h 02 min")


def test_rates_are_measured_from_the_first_commit_not_from_the_start():
    rates = Rates(total=40)
    assert rates.update(20.0, 0, 0) == (None, None)  # Ray and the models starting: nothing known yet
    assert rates.update(22.0, 4, 40) == (None, None)  # the first commit: one point, no rate
    rate, left = rates.update(24.0, 12, 120)  # 8 documents and 80 vectors in 2 s
    assert rate == 40.0 and left == 7.0  # 28 documents left at 0.25 s each


def test_off_a_terminal_a_line_when_the_counts_moved_and_a_heartbeat_when_they_did_not(caplog):
    clock = Clock()
    line = ProgressLine(40, every=10.0, live=False, clock=clock, quiet_lines=3)
    assert line.tick == 10.0
    caplog.set_level(logging.INFO, logger="jobs.store.writers")
    for done in (0, 0, 0, 0, 5, 5, 12, 40):
        clock.now += 10
        line.update(done, 0, done * 10)
    committed = [int(r.getMessage().split()[1].split("/")[0]) for r in caplog.records]
    assert committed == [0, 0, 5, 12, 40]  # the first, one heartbeat after three quiet samples, then each move


def test_on_a_terminal_one_line_is_redrawn_and_log_records_print_above_it():
    term = Terminal()
    handler = logging.StreamHandler(term)
    logger = logging.getLogger("test.progress.terminal")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        with ProgressLine(40, live=True, stream=term, clock=Clock()) as line:
            assert line.tick == 1.0 and handler.stream is not term  # routed through the line's console
            line.update(3, 0, 30)
            logger.warning("a warning while the line is shown")
            line.update(7, 0, 70)
            line.finish(40, 0, 400)
        assert handler.stream is term  # given back
    finally:
        logger.removeHandler(handler)
    out = term.getvalue()
    assert out.startswith(CLEAR + "committed 3/40 documents · 30 chunks")
    # The line is cleared before the record and drawn again after it; the record starts a line of its own.
    assert CLEAR + "a warning while the line is shown\n" + CLEAR + "committed 3/40 documents" in out
    assert out.index("committed 7/40") > out.index("a warning")
    assert out.endswith("committed 7/40 documents · 70 chunks" + CLEAR)  # erased when the writes end


def test_a_terminal_line_routes_stderr_through_it_and_gives_it_back(monkeypatch):
    term = Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    with ProgressLine(10, live=True, stream=term, clock=Clock()) as line:
        line.update(1, 0, 5)
        print("printed by someone else", file=sys.stderr)
    assert sys.stderr is term
    assert CLEAR + "printed by someone else\n" + CLEAR + "committed 1/10" in term.getvalue()


def test_the_time_left_is_counted_in_bytes_where_the_sizes_are_known():
    """Ten notes of 1 kB and one workbook of 90 kB: with nine more notes settled in 9 s, the documents say
    one is left at 1 s; the bytes say the 90 kB left take 90 s."""
    by_documents, by_bytes = Rates(total=11), Rates(total=11)
    assert by_documents.update(0.0, 1, 10) == by_bytes.update(0.0, 1, 10, work=(1_000, 100_000)) == (None, None)
    assert by_documents.update(9.0, 10, 100) == (10.0, 1.0)
    assert by_bytes.update(9.0, 10, 100, work=(10_000, 100_000)) == (10.0, 90.0)
