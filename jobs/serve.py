"""`corpusmill serve`: search over HTTP, with the collection's model loaded once.

    GET /search?q=...&k=5&mode=hybrid&filter=tags=ops&filter=path=docs/*&min_similarity=0.3
        -> {"query": ..., "hits": [...]}: the JSON `corpusmill search --json` prints, hit for hit
    GET /collection -> the collection's name, model and the metadata keys its documents carry
    GET /            -> a search page (jobs/web/search.html)

FastAPI on uvicorn. One process holds one database connection and one model: searches are serialized
by a lock (psycopg connections and the model's tokenizer are not shared between threads), which keeps
a query's latency what `search` measures; run more processes behind a proxy for more throughput.
"""

from __future__ import annotations

import logging
import threading
import time
from importlib import resources

import uvicorn
from fastapi import FastAPI, HTTPException, Query
from fastapi.responses import HTMLResponse

from jobs.errors import UserError

log = logging.getLogger(__name__)

MODES = ("vector", "text", "hybrid", "hybrid-doc")


def create_app(coll):
    """The ASGI app serving `coll` (a jobs.api.Collection, opened by the caller and closed after)."""
    lock = threading.Lock()
    keys: dict[str, object] = {}  # the metadata keys, read at most once a minute (a scan of the table)
    page = resources.files("jobs.web").joinpath("search.html").read_text(encoding="utf-8")
    app = FastAPI(title="corpusmill", summary=f"search the collection {coll.name}")

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def index() -> str:
        return page

    @app.get("/collection")
    def collection() -> dict:
        with lock:
            if time.monotonic() - keys.get("at", -60.0) >= 60:
                keys.update(at=time.monotonic(), keys=coll.metadata_keys())
        return {"collection": coll.name, "embedding_model": coll.embedding_model,
                "search_mode": coll.settings.database.search_mode, "metadata_keys": keys["keys"]}

    @app.get("/search")
    def search(q: str = Query(..., min_length=1, description="the query"),
               k: int = Query(5, ge=1, le=100),
               mode: str | None = Query(None, description="vector, text, hybrid or hybrid-doc"),
               filter: list[str] = Query(default_factory=list, description="KEY=VALUE, KEY=V1,V2 or path=GLOB"),
               min_similarity: float | None = Query(None, ge=-1, le=1)) -> dict:
        if mode is not None and mode not in MODES:
            raise HTTPException(422, f"mode must be one of {', '.join(MODES)}")
        try:
            with lock:
                hits = coll.search(q, k, mode=mode, filters=filter, min_similarity=min_similarity)
        except UserError as exc:  # a filter that cannot be read, and the like: the user's to fix
            raise HTTPException(422, str(exc)) from exc
        return {"query": q, "hits": [h.to_dict() for h in hits]}

    return app


def serve(coll, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve `coll` until interrupted; the model is loaded before the port opens."""
    coll.warm()
    log.info("serving collection %s on http://%s:%d/", coll.name, host, port)
    uvicorn.run(create_app(coll), host=host, port=port, log_level="warning")
