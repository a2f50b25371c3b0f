"""`corpusmill serve`: search over HTTP, with the collection's model loaded once.

    GET /search?q=...&k=5&mode=hybrid&filter=tags=ops&filter=path=docs/*&min_similarity=0.3
        -> {"query": ..., "hits": [...]}: the JSON `corpusmill search --json` prints, hit for hit
    GET /collection -> the collection's name, model, the metadata keys its documents carry, the limits
    GET /            -> a search page (jobs/web/search.html)

FastAPI on uvicorn. Requests run side by side: each search borrows one of a pool of read-only database
connections (jobs/search/read_pool.py), and only the query's embedding is taken one at a time (the model's
fast tokenizer is not safe to call from two threads), so one slow search does not hold up the others.
Each statement of a search is bounded by a statement timeout (503 past it), each request by
jobs/search/limits.py (422 naming the limit). Answers: 400 a query string that is not UTF-8, 401 a missing
or wrong bearer token, 409 a mode whose data is not built, 422 a request outside the limits, 503 a
timeout, a busy pool or an unreachable database; never a traceback for a request's content.

A service that listens beyond loopback requires a bearer token (`Authorization: Bearer …`) on everything
but the page; one on loopback requires it when given one. Cross-origin requests are refused unless
origins are named (--cors-origin).
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import socket
import threading
import time
import urllib.parse
from contextlib import asynccontextmanager, contextmanager
from importlib import resources
from pathlib import Path

import psycopg
import uvicorn
from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import HTMLResponse, JSONResponse

from jobs.errors import ConfigError, NotFoundError, UnreachableError, UserError
from jobs.search.limits import SearchTimeout
from jobs.search.read_pool import Busy
from jobs.search.searcher import NotBuiltError

log = logging.getLogger(__name__)

MODES = ("vector", "text", "hybrid", "hybrid-doc")
PARAMS = ("q", "k", "mode", "filter", "min_similarity")
KEYS_EVERY_S = 600.0  # how often /collection's metadata keys are read again (a sample of the table)
KEYS_SAMPLE_ROWS = 20000
TOKEN_MIN_CHARS = 16


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def _reply(status: int, detail: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status, headers=headers)


class Guard:
    """Checks made before a request reaches FastAPI: a query string whose percent-escapes are not UTF-8
    (Starlette would read them as U+FFFD and search for that), and the bearer token."""

    def __init__(self, app, token: str | None):
        self.app, self.token = app, token.encode() if token else None

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            raw = scope.get("query_string", b"")
            try:
                urllib.parse.unquote_to_bytes(raw.replace(b"+", b" ")).decode("utf-8")
            except UnicodeDecodeError:
                await _reply(400, "the query string is not valid UTF-8: percent-encode the UTF-8 bytes of the "
                             "text")(scope, receive, send)
                return
            if self.token is not None and scope["path"] != "/" and not self._authorized(scope):
                await _reply(401, "this service needs its bearer token: send `Authorization: Bearer <token>`",
                             {"WWW-Authenticate": "Bearer"})(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _authorized(self, scope) -> bool:
        for name, value in scope.get("headers", []):
            if name == b"authorization":
                scheme, _, given = value.partition(b" ")
                return scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self.token)
        return False


class KeptKeys:
    """The metadata keys /collection shows: read from a sample of the table by a background thread when
    the service starts and every KEYS_EVERY_S, never while a request waits."""

    def __init__(self, coll, every_s: float = KEYS_EVERY_S):
        self.coll, self.every_s = coll, every_s
        self.keys: list[str] | None = None
        self.as_of: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="corpusmill-keys", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.keys = self.coll.metadata_keys(sample_rows=KEYS_SAMPLE_ROWS)
                self.as_of = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            except (psycopg.Error, UserError) as exc:  # the last figures stay; the next round tries again
                log.warning("could not read the collection's metadata keys: %s", exc)
            self._stop.wait(self.every_s)


@contextmanager
def _answered():
    """Exceptions a request's database work raised, as their HTTP answers (_search_error); any other
    goes on as the bug it is (500, logged with its traceback)."""
    try:
        yield
    except Exception as exc:
        answer = _search_error(exc)
        if answer is None:
            raise
        raise answer from exc


def _search_error(exc: Exception) -> HTTPException | None:
    """The answer to an exception a search raised because of its request or the database's state; None
    for anything else, which is a bug (500, logged with its traceback)."""
    if isinstance(exc, SearchTimeout):
        return HTTPException(503, f"{exc}, or try again")
    if isinstance(exc, (psycopg.errors.DataException, psycopg.errors.ProgramLimitExceeded)):
        # PostgreSQL refused the request's own values (a pattern it cannot compile, a number out of range)
        return HTTPException(422, f"the database refused this request: {str(exc).splitlines()[0]}")
    if isinstance(exc, (Busy, UnreachableError, psycopg.OperationalError)):
        return HTTPException(503, f"the database cannot take the search now: {str(exc).splitlines()[0]}")
    if isinstance(exc, NotFoundError):  # a mode whose data the write side has not built
        return HTTPException(409, str(exc))
    if isinstance(exc, UserError):  # a limit, a filter that cannot be read, an unknown mode
        return HTTPException(422, str(exc))
    return None


def create_app(coll, token: str | None = None, cors_origins: tuple[str, ...] | list[str] = (),
               keys_every_s: float = KEYS_EVERY_S) -> FastAPI:
    """The ASGI app serving `coll` (a jobs.api.Collection, opened by the caller and closed after; made
    concurrent with coll.concurrent(n) for requests to run side by side). `token`: the bearer token
    every request but the page's must carry; `cors_origins`: origins whose pages may call the API."""
    page = resources.files("jobs.web").joinpath("search.html").read_text(encoding="utf-8")
    keys = KeptKeys(coll, keys_every_s)

    @asynccontextmanager
    async def lifespan(_app):
        keys.start()
        yield
        keys.stop()

    app = FastAPI(title="corpusmill", summary=f"search the collection {coll.name}", lifespan=lifespan)
    app.add_middleware(Guard, token=token)
    # Added last, so outermost: a browser's preflight (which never carries the token) is answered before
    # the Guard sees it, and a 401 or 400 from the Guard still carries the headers that let the page read it.
    if cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=list(cors_origins), allow_methods=["GET"],
                           allow_headers=["Authorization"])

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        # One sentence, as every other answer here carries: `{"detail": "k: Input should be ..."}`, not
        # FastAPI's list of error objects.
        return _reply(422, "; ".join(_said(e) for e in exc.errors()[:5]) or "the request is not valid")

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def index() -> str:
        return page

    @app.get("/collection")
    def collection() -> dict:
        with _answered():
            coll.follow_active()  # after a reembed: the model it searches with now
        return {"collection": coll.name, "embedding_model": coll.embedding_model,
                "search_mode": coll.settings.database.search_mode, "metadata_keys": keys.keys or [],
                "metadata_keys_as_of": keys.as_of, "limits": coll.limits.to_dict(),
                "statement_timeout_s": coll.statement_timeout_s}

    @app.get("/search")
    def search(request: Request,
               q: str = Query(..., description="the query"),
               k: int = Query(5, ge=1, le=coll.limits.k),
               mode: str | None = Query(None, description="vector, text, hybrid or hybrid-doc"),
               filter: list[str] = Query(default_factory=list, description="KEY=VALUE, KEY=V1,V2 or path=GLOB"),
               min_similarity: float | None = Query(None, ge=-1, le=1)) -> dict:
        unknown = sorted(set(request.query_params) - set(PARAMS))
        if unknown:
            raise HTTPException(422, f"unknown parameter(s) {', '.join(map(repr, unknown[:5]))}; this endpoint "
                                f"takes {', '.join(PARAMS)}")
        if mode is not None and mode not in MODES:
            raise HTTPException(422, f"mode must be one of {', '.join(MODES)}")
        with _answered():
            hits = coll.search(q, k, mode=mode, filters=filter, min_similarity=min_similarity)
        return {"query": q, "hits": [h.to_dict() for h in hits]}

    return app


def _said(error: dict) -> str:
    """One FastAPI validation error as `param: message`."""
    where = [str(p) for p in error.get("loc", ()) if p not in ("query", "body", "path", "header")]
    return f"{'.'.join(where) or 'request'}: {error.get('msg', 'not valid')}"


def read_token(token_file: str | None) -> str | None:
    """The bearer token: `token_file`'s first line, else CORPUSMILL_SERVE_TOKEN; None when neither is given."""
    if token_file:
        path = Path(token_file)
        if not path.is_file():
            raise NotFoundError(f"token file not found: {token_file}")
        lines = path.read_text(encoding="utf-8").strip().splitlines()
        if not lines or not lines[0].strip():
            raise UserError(f"token file {token_file} is empty")
        return lines[0].strip()
    return os.environ.get("CORPUSMILL_SERVE_TOKEN", "").strip() or None


def check_exposure(host: str, token: str | None) -> None:
    """Refuse to listen beyond loopback without a token, and refuse a token too short to be one."""
    if token is not None and len(token) < TOKEN_MIN_CHARS:
        raise UserError(f"the bearer token is {len(token)} characters long; use at least {TOKEN_MIN_CHARS} "
                        "(e.g. `openssl rand -hex 32`)")
    if token is None and not is_loopback(host):
        raise UserError(f"--host {host} listens beyond this machine: give the service a bearer token first "
                        "(CORPUSMILL_SERVE_TOKEN, or --token-file FILE); clients then send "
                        "`Authorization: Bearer <token>`")


def warm(coll) -> None:
    """Load the model and check the default search mode's data before the port opens. Data a mode needs
    that is not built (a table written before the terms were analysed) is one warning: the service starts
    for vector search and answers that mode 409 with what to run."""
    try:
        coll.warm()
    except NotBuiltError as exc:
        log.warning("%s; until then this service answers 409 in that mode", str(exc).split(", or search")[0])
        coll.warm("vector")


def listen(host: str, port: int) -> socket.socket:
    """The service's listening socket, bound before the model loads: a port in use is one line (exit 2)
    at once, not a "serving" line and then uvicorn's own exit status."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: a restart reuses the port
    try:
        sock.bind((host, port))
        sock.listen(2048)  # as uvicorn's backlog; until then a second bind of the port would succeed too
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc} (another `corpusmill serve`? "
                          "pass --port N, or --host)") from exc
    sock.set_inheritable(True)
    return sock


def serve(coll, host: str = "127.0.0.1", port: int = 8000, *, token: str | None = None,
          cors_origins: tuple[str, ...] | list[str] = (), pool_size: int = 8,
          statement_timeout_s: float | None = None, sock: socket.socket | None = None) -> None:
    """Serve `coll` until interrupted: `pool_size` searches at once, each statement bounded by
    `statement_timeout_s` (default: the config's); the model is loaded before the port opens. `sock`: the
    socket listen() bound (else it is bound here)."""
    check_exposure(host, token)
    sock = sock or listen(host, port)
    # One thread per query's encoding: requests already run side by side, a one-query batch gains nothing
    # from torch's intra-op threads, and on a busy machine their spin-waiting makes each encoding wait for
    # cores the database's work needs.
    import torch  # late: the model's own import; torch's threads are per process, set before its first call

    torch.set_num_threads(1)
    coll.concurrent(pool_size, statement_timeout_s)
    warm(coll)
    log.info("serving collection %s on http://%s:%d/ (%d connections, statement timeout %s s)", coll.name, host,
             port, pool_size, coll.statement_timeout_s or "none")
    server = uvicorn.Server(uvicorn.Config(create_app(coll, token, cors_origins), log_level="warning"))
    with sock:
        server.run(sockets=[sock])
