"""The command line's `serve` and `upgrade`: their options and what each runs (jobs/cli.py registers them).

Kept apart from jobs/cli.py, which holds every other command, so that neither outgrows one reader; the
same rules hold here: each command imports what it runs inside its own function, so that registering
them costs `corpusmill status` nothing.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from jobs.cli_args import positive_int, seconds


def add_parsers(sub, add_db_args: Callable[[argparse.ArgumentParser], None]) -> None:
    """`serve` and `upgrade` on the command line's subparsers `sub` (jobs/cli.py's database options passed in)."""
    p = sub.add_parser("serve", help="a search page and JSON search over HTTP, the model loaded once")
    p.add_argument("--collection", help="default: the config's collection")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; 0.0.0.0: every "
                   "interface, which requires a bearer token: --token-file or CORPUSMILL_SERVE_TOKEN)")
    p.add_argument("--port", type=positive_int, default=8000, help="default 8000")
    p.add_argument("--token-file", metavar="FILE", help="a file whose first line is the bearer token clients must "
                   "send (else CORPUSMILL_SERVE_TOKEN); required to listen beyond loopback")
    p.add_argument("--cors-origin", action="append", metavar="ORIGIN",
                   help="an origin (https://app.example.com) whose pages may call the API; repeatable (default: none)")
    p.add_argument("--pool-size", type=positive_int, default=8, metavar="N",
                   help="searches that run at once, each on its own read-only database connection (default 8)")
    p.add_argument("--statement-timeout", type=seconds, metavar="SECONDS",
                   help="stop a search statement after this long and answer 503 (default: the config's "
                   "database.statement_timeout_s; 0: no limit)")
    add_db_args(p)
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("upgrade", help="bring the database's schema and the collections' tables up to date (the "
                       "read commands never change them); --doc-vectors builds what `--mode hybrid-doc` needs")
    p.add_argument("--collection", help="only this collection's tables (default: every collection)")
    p.add_argument("--doc-vectors", action="store_true",
                   help="build (or bring up to date) the documents' outline vectors that hybrid-doc ranks by, with "
                   "the collection's model; collections that have them are kept current without it")
    add_db_args(p)
    p.set_defaults(func=cmd_upgrade)


def cmd_serve(args) -> int:
    from jobs.api import Collection, load_settings  # late: FastAPI, uvicorn and the model only for `serve`
    from jobs.serve import check_exposure, listen, read_token, serve  # late: as above

    token = read_token(args.token_file)
    check_exposure(args.host, token)  # before the database is opened and the model loaded
    sock = listen(args.host, args.port)
    with sock, Collection(args.collection, settings=load_settings(args.config, args.database_url)) as coll:
        print(f"corpusmill: searching collection {coll.name} at http://{args.host}:{args.port}/ "
              f"(JSON: /search?q=...{'; bearer token required' if token else ''}; Ctrl-C stops)", flush=True)
        serve(coll, args.host, args.port, token=token, cors_origins=args.cors_origin or (),
              pool_size=args.pool_size, statement_timeout_s=args.statement_timeout, sock=sock)
    return 0


def cmd_upgrade(args) -> int:
    from jobs.api import load_settings, upgrade  # late: psycopg (and torch for document vectors) only for `upgrade`

    done = upgrade(args.collection, doc_vectors=args.doc_vectors, settings=load_settings(args.config, args.database_url))
    for name, embedded in done.collections.items():
        print(f"{name}: up to date" + (f" · document vectors up to date ({embedded} embedded now)"
                                       if embedded is not None else ""))
    print(f"schema {done.schema}: " + (f"applied {', '.join(done.applied)}" if done.applied else "up to date"))
    return 0
