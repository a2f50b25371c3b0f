"""`corpusmill bench-embedders`: the same stored chunks embedded by each model, judged on golden questions.

Each model other than the collection's own gets a scratch embedding space (as `reembed` builds one),
searched through its HNSW index. The winner is chosen by recall@5, then @10, then @1. With
`--write-winner` the collection switches to the winner's space as it stands: its vectors are already
computed, so nothing is embedded twice. The losers' scratch spaces are dropped.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from jobs.config import JobConfig
from jobs.embed.models import embedding_dimension
from jobs.reembed import fill_space, make_embedder, open_active, switch_to
from jobs.search import ranking
from jobs.store.pgvector import Collection, PgStore
from jobs.store.url import database_url
from jobs.tools.evaluate import EvalReport, evaluate, load_golden


@dataclass
class Entry:
    model: str
    space: Collection
    report: EvalReport
    embed_seconds: float

    @property
    def rank_key(self) -> tuple[float, float, float]:
        r = self.report.recall
        return (r.get(5, 0.0), r.get(10, 0.0), r.get(1, 0.0))


def bench_embedders(cfg: JobConfig, collection: str, golden: Path, models: list[str],
                    write_winner: bool = False) -> tuple[list[Entry], Entry]:
    questions = load_golden(golden)
    entries: list[Entry] = []
    with PgStore(database_url(cfg), cfg.database.schema_name) as store:
        store.migrate()
        # Its scratch spaces share names with a reembed's, and --write-winner switches the active space:
        # no ingest or reembed may write the collection meanwhile.
        store.lock_collection(collection, f"corpusmill bench-embedders {collection}", cfg.database.lock_wait_seconds)
        active = open_active(store, collection)
        for model in dict.fromkeys(models):  # each once, in the order given
            started = time.monotonic()
            embedder = make_embedder(cfg, model)  # one load serves the chunks and the questions
            if model == active.embedding_model:
                space = active
            else:
                space = store.begin_space(active, model, embedding_dimension(model))
                fill_space(store, active, space, embedder)
                store.ensure_indexes(space, cfg.database)
            seconds = time.monotonic() - started

            def search(qs: list[str], k: int, space=space, embedder=embedder) -> list[list[dict]]:
                return ranking.search_many(store, space, embedder.encode(qs), k, cfg.database.ef_search)

            entries.append(Entry(model, space, evaluate(questions, search), seconds))
        winner = max(entries, key=lambda e: e.rank_key)  # ties go to the model listed first
        keep = {active.chunk_table}  # the collection's own space stays (retired if the winner replaces it)
        if write_winner and winner.space.chunk_table != active.chunk_table:
            switch_to(store, cfg, active, winner.space)
            keep.add(winner.space.chunk_table)
        for e in entries:
            if e.space.chunk_table not in keep:
                store.drop_space(e.space)  # a scratch space nobody asked to keep
                keep.add(e.space.chunk_table)
    return entries, winner


def format_bench(entries: list[Entry], winner: Entry) -> str:
    lines = [f"{'model':<60} {'dim':>5} {'R@1':>6} {'R@5':>6} {'R@10':>6} {'MRR':>6} {'embed s':>8}"]
    for e in entries:
        r = e.report.recall
        mark = "  ← winner" if e is winner else ""
        lines.append(f"{e.model[-60:]:<60} {e.space.dimension:>5} {r.get(1, 0):>6.3f} {r.get(5, 0):>6.3f} "
                     f"{r.get(10, 0):>6.3f} {e.report.mrr:>6.3f} {e.embed_seconds:>8.1f}{mark}")
    return "\n".join(lines)
