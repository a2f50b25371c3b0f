"""Helpers of the service tests: a small collection stored through the write side, and `corpusmill serve`'s
app on a real uvicorn in a thread, asked over plain HTTP (raw query strings, as a hostile client sends)."""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time

import uvicorn

from jobs.api import Collection, load_settings
from jobs.serve import create_app, warm
from tests.factories import chunk_row, doc_row

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
PAGES = {
    "rollout": ("Rolling updates", {"tags": ["deploy", "ops"]},
                ["A rolling update replaces pods a few at a time so the deployment keeps serving traffic.",
                 "maxSurge sets how many extra pods a rolling update may add above the desired count."]),
    "probes": ("Readiness probes", {"tags": ["ops"]},
               ["Readiness probes tell a rolling update when a new pod can take traffic."]),
    "backup": ("Backups", {"tags": ["storage"]},
               ["Take a snapshot of the volume before you upgrade the database."]),
}


def build(store, name: str) -> None:
    """The collection `name` with PAGES, embedded by the packaged model, and its search indexes built as a
    load builds them."""
    from jobs.embed.backends import load_model

    model = load_model(MODEL)
    coll = store.ensure_collection(name, MODEL, 384)
    for doc, (title, meta, texts) in PAGES.items():
        chunks = []
        for i, text in enumerate(texts):
            c = chunk_row(doc, i, text, None, name)
            c.update(heading_path=[title, f"part {i}"], breadcrumb=f"{title} › part {i}", metadata=meta)
            chunks.append(c)
        vectors = model.encode([c["embed_text"] for c in chunks], normalize_embeddings=True, show_progress_bar=False)
        for c, v in zip(chunks, vectors):
            c["embedding"] = v
        store.mark_pending(name, "r1", [doc_row(doc)])
        store.commit_document(coll, doc_row(doc), chunks, "r1")
    store.ensure_indexes(coll, load_settings().database)


def built(pg_url: str, name: str) -> str:
    """A test module's collection `name` (its module-scoped fixture's body): the schema migrated and PAGES
    stored (build). Returns the URL, for the fixture to hand on."""
    from jobs.store.pgvector import PgStore

    with PgStore(pg_url) as store:
        store.migrate()
        build(store, name)
    return pg_url


def open_collection(name: str, url: str, pool: int = 4, timeout_s: float = 10.0, schema: str = "corpusmill"):
    settings = load_settings(database_url=url)
    settings = settings.model_copy(update={"database": settings.database.model_copy(
        update={"statement_timeout_s": timeout_s, "schema_name": schema})})
    coll = Collection(name, settings=settings)
    coll.concurrent(pool)
    return coll


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running(coll, **app_args):
    """`coll` served by uvicorn on a free loopback port, in a thread; yields the port."""
    warm(coll)
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(coll, **app_args), host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(30)


def get(port: int, path: str, headers: dict | None = None, timeout: float = 120) -> tuple[int, dict]:
    """GET `path` as given (no re-encoding): the status and the JSON body."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path, headers=headers or {})
        r = conn.getresponse()
        body = r.read()
    finally:
        conn.close()
    try:
        return r.status, json.loads(body)
    except ValueError:
        return r.status, {"raw": body.decode("utf-8", "replace")}
