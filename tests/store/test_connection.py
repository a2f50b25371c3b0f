"""The replay of a store call cut short by a broken connection, without a server (the server-side faults
are in test_pgvector.py)."""

import socket
import threading
import time

import psycopg
import pytest

from jobs.store.connection import REPLAYS, DatabaseUnavailable, connect_with_backoff, reconnecting


class FakeStore:
    """What `reconnecting` asks of a store: `_depth`, `connection_lost()`, `reconnect()`."""

    def __init__(self, failures: int, error=psycopg.OperationalError, lost: bool = True):
        self._depth, self.failures, self.error, self.lost, self.reconnects, self.calls = 0, failures, error, lost, 0, 0

    def connection_lost(self) -> bool:
        return self.lost

    def reconnect(self) -> None:
        self.reconnects += 1

    @reconnecting
    def write(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error("server closed the connection unexpectedly\nmore detail")
        return "ok"

    @reconnecting
    def outer(self) -> str:
        return self.write()


def test_a_call_the_connection_broke_under_is_replayed_on_a_fresh_one():
    store = FakeStore(failures=2)
    assert store.write() == "ok" and store.calls == 3 and store.reconnects == 2


def test_a_flapping_server_stops_the_store_after_the_replays():
    store = FakeStore(failures=REPLAYS + 1)
    with pytest.raises(DatabaseUnavailable, match=f"broke {REPLAYS + 1} times in one write "
                                                  r"\(server closed the connection unexpectedly\)"):
        store.write()
    assert store.reconnects == REPLAYS


def test_an_error_on_a_healthy_connection_is_not_replayed():
    store = FakeStore(failures=1, lost=False)
    with pytest.raises(psycopg.OperationalError):
        store.write()
    assert store.calls == 1 and store.reconnects == 0


def test_only_the_outermost_call_replays():
    store = FakeStore(failures=1)
    assert store.outer() == "ok" and store.calls == 2 and store.reconnects == 1 and store._depth == 0


def test_a_server_that_stays_away_ends_the_backoff_within_its_budget(monkeypatch):
    with socket.socket() as s:  # a port nothing listens on: each attempt is refused at once
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sleeps, real_sleep, me = [], time.sleep, threading.current_thread()

    def sleep(seconds):  # this thread's waits only: another test's background thread may sleep meanwhile
        if threading.current_thread() is me:
            sleeps.append(seconds)
        real_sleep(seconds)

    monkeypatch.setattr(time, "sleep", sleep)
    with pytest.raises(DatabaseUnavailable, match=r"did not come back within 1.6 s \(.*refused"):
        connect_with_backoff(f"postgresql://nobody@127.0.0.1:{port}/none", "test", 1.6)
    # 0.5 s doubling; no wait that would end past the budget (0.5 + 1 + 2 > 1.6)
    assert sleeps and sleeps == [0.5, 1.0][:len(sleeps)]
