"""The connection to PostgreSQL and its faults: opening it, opening it again with backoff after the server
went away (a restart, a dropped network), and replaying a store call the broken connection cut short.

Only connection faults are retried. Anything else (bad data, a constraint) is the document's own fault.
"""

from __future__ import annotations

import functools
import logging

import psycopg
from tenacity import RetryError, Retrying, retry_if_exception_type, stop_before_delay, wait_exponential

from jobs.errors import UnreachableError

log = logging.getLogger(__name__)

# Connection faults worth a reconnect: the server restarted, the network dropped. Anything else (bad
# data, a constraint) is the document's own fault and must not be retried.
_CONNECTION_ERRORS = (psycopg.OperationalError, psycopg.InterfaceError)


REPLAYS = 3  # a call replayed more often than this on fresh connections is not a restart but a flapping server


class DatabaseUnavailable(UnreachableError):  # a ConnectionError
    """The server went away mid-run and did not come back within the reconnect budget."""


def first_line(exc: BaseException) -> str:
    """An exception's first line, as the reconnect warnings show it."""
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def connect(url: str, application_name: str) -> psycopg.Connection:
    # application_name: an operator sees which run holds a connection (pg_stat_activity) and a
    # second ingest can name the run that holds a collection's lock.
    # connect_timeout bounds one attempt (an unroutable host); the server-side keepalives let a lock
    # held by a client whose machine died go within ~2 minutes instead of the kernel's 2 hours.
    return psycopg.connect(url, autocommit=True, application_name=application_name[:63],
                           connect_timeout=10,
                           options="-c tcp_keepalives_idle=60 -c tcp_keepalives_interval=10 "
                                   "-c tcp_keepalives_count=6")


def connect_with_backoff(url: str, application_name: str, seconds: float) -> psycopg.Connection:
    """A new connection after the server went away, with bounded exponential backoff (0.5 s doubling to
    8 s, `seconds` in all); DatabaseUnavailable when the server is not back by then."""
    # No attempt starts after the budget: stop before a wait that would end past it.
    retrying = Retrying(retry=retry_if_exception_type(psycopg.OperationalError),
                        wait=wait_exponential(multiplier=0.5, max=8.0), stop=stop_before_delay(seconds))
    try:
        return retrying(connect, url, application_name)
    except RetryError as exc:
        last = exc.last_attempt.exception()
        raise DatabaseUnavailable(f"PostgreSQL did not come back within {seconds:g} s ({first_line(last)})") from last


# Hand-written rather than with tenacity (as connect_with_backoff is): whether to replay asks the store
# (`connection_lost()`), what comes between attempts is a reconnect rather than a wait, and a nested call
# must not retry at all. As tenacity callbacks built per call (retry predicate, before_sleep,
# retry_error_callback) the same rule reads longer and less plainly than this loop.
def reconnecting(method):
    """Run a store method again on a fresh connection when the old one broke under it. Only for methods
    that are whole transactions (or reads) and idempotent: a document's replace-and-checkpoint can be
    replayed, since the server rolled back whatever the broken connection had not committed. Only the
    outermost store call replays (an inner one's transaction belonged to the broken connection), at
    most REPLAYS times.

    The store provides `_depth` (store calls in progress), `connection_lost()` and `reconnect()`."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        if self._depth:
            return method(self, *args, **kwargs)
        for replay in range(REPLAYS + 1):
            self._depth += 1
            try:
                return method(self, *args, **kwargs)
            except _CONNECTION_ERRORS as exc:
                if not self.connection_lost():
                    raise
                first = first_line(exc)
                if replay == REPLAYS:
                    raise DatabaseUnavailable(f"the connection to PostgreSQL broke {REPLAYS + 1} times in one "
                                              f"{method.__name__} ({first})") from exc
                log.warning("lost the connection to PostgreSQL (%s); reconnecting", first)
            finally:
                self._depth -= 1
            self.reconnect()
    return wrapper
