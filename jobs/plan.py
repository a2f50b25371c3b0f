"""The `plan` job: what an ingest would do, decided the way `ingest` decides it before it starts.

Kept apart from jobs/ingest.py so that `corpusmill plan` reads the listing and the store without
importing Ray, torch or spaCy (the stages' modules pull them in).

A listing is planned a page at a time (jobs.sources.discover.iter_discovered): each page's stored
documents are looked up by path, the listed paths go to a temporary table (jobs/store/listed_paths.py)
and the plan keeps only the files to process (or, for an ingest, hands them on page by page to be
stored as work items: jobs/store/work_items.py), so a run over a large corpus holds little more than
a page. A frozen manifest is one JSON file read whole, and is planned whole.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import nullcontext

from jobs.config import JobConfig
from jobs.sources.changes import Plan, Planner, make_plan
from jobs.sources.discover import SourceFile, iter_discovered
from jobs.sources.manifest import load_manifest, snapshot
from jobs.sources.storage import StorageOptions
from jobs.store.listed_paths import ListedPaths
from jobs.store.pgvector import PgStore
from jobs.store.schema import SchemaMissing
from jobs.store.spaces import space_for_ingest
from jobs.store.url import database_url

log = logging.getLogger(__name__)


def make_plan_for(cfg: JobConfig, store: PgStore | None, storage: StorageOptions | None = None,
                  on_relisted: Callable[[list[SourceFile]], None] | None = None,
                  on_work: Callable[[list[SourceFile]], None] | None = None, retry_failed: bool = False) -> Plan:
    """Discover and plan. Files whose listing matches what the store recorded are not read (unless
    input.trust_listing is off); the sha256 of the others decides add/update/skip. A file that failed on
    the content it still holds stays failed unless `retry_failed`. `on_relisted` and `on_work`: see
    jobs.sources.changes.Planner. `store` None: a database that holds nothing yet (plan_only)."""
    storage = storage or StorageOptions.from_config(cfg.storage)
    if cfg.input.manifest is not None:
        plan = _frozen_plan(cfg, store, storage, retry_failed)
        if on_work:
            plan.hand_over(on_work)
        return plan
    planner, skipped = Planner(cfg.fingerprint(), on_relisted, on_work, retry_failed), []
    with ListedPaths(store.url, store.schema) if store else nullcontext() as listed:
        for page in iter_discovered(cfg.input.roots, cfg.input.include, cfg.input.exclude, storage,
                                    lambda paths: store.stored_documents(cfg.collection, paths) if store else {},
                                    skipped, follow_external_links=cfg.input.follow_external_links,
                                    trust_listing=cfg.input.trust_listing):
            planner.add(page)
            if listed:
                listed.add([f.source_path for f, _ in page])
        not_listed = [] if cfg.keep_removed or not listed else listed.not_listed(cfg.collection)
    return planner.finish(not_listed, skipped, cfg.keep_removed)


def _frozen_plan(cfg: JobConfig, store: PgStore | None, storage: StorageOptions, retry_failed: bool = False) -> Plan:
    stored = store.stored_documents(cfg.collection) if store else {}
    known = stored if cfg.input.trust_listing else None
    manifest = load_manifest(cfg.input.manifest)
    roots = cfg.input.roots or list(manifest["roots"])
    snap = snapshot(manifest, roots, cfg.input.include, cfg.input.exclude, storage, known,
                    follow_external_links=cfg.input.follow_external_links)
    # Changed or missing files keep whatever the store holds for them: the snapshot says nothing new.
    held = {p for p in snap.changed + snap.missing}
    plan = make_plan(snap.files, {p: d for p, d in stored.items() if p not in held}, cfg.fingerprint(),
                     cfg.keep_removed, retry_failed)
    plan.not_as_frozen = sorted(held)
    plan.hashed = snap.hashed  # as discovery read them: a changed file was read to learn it had changed
    for path in plan.not_as_frozen:
        log.warning("%s changed or vanished since the manifest was frozen: left out of this run", path)
    return plan


def delete_all_refusal(plan: Plan, cfg: JobConfig) -> str | None:
    """Why an ingest of `plan` must stop before it deletes anything, or None: it would delete every
    document of the collection and found no file in their place (a wrong --input or --collection, an
    empty folder, a mount that is not there), and the config does not allow that (`allow_delete_all`)."""
    if not plan.deletes_all or cfg.allow_delete_all:
        return None
    where = ", ".join(str(r) for r in cfg.input.roots) or "the manifest's roots"
    return (f"this run would delete all {len(plan.delete)} documents of collection {cfg.collection!r}: no file "
            f"under {where} matches input.include. Check --input and --collection; to empty the collection on "
            "purpose, pass --allow-delete-all (or --keep-removed to keep them)")


def plan_only(cfg: JobConfig, retry_failed: bool = False) -> Plan:
    """What ingest would do (with `retry_failed`: `ingest --retry-failed`); reads only the listing and the
    files whose listing changed, writes nothing, not even the schema: a database that has no corpusmill
    tables yet plans every file as an add, and one whose schema predates this corpusmill is refused with
    the command that brings it up to date (a plan against tables of another shape could be wrong)."""
    with PgStore(database_url(cfg), cfg.database.schema_name) as store:
        try:
            store.check_schema(then="plan again")
        except SchemaMissing:
            return make_plan_for(cfg, None, retry_failed=retry_failed)
        cfg = space_for_ingest(store, cfg)  # the model (and so the fingerprint) that ingest would use
        return make_plan_for(cfg, store, retry_failed=retry_failed)


def plan_json(plan: Plan, cfg: JobConfig) -> dict:
    """`corpusmill plan --json`: the counts, the files by action, and why an ingest would stop (or null)."""
    return {**plan.counts(), "read": plan.hashed, "not_as_frozen": plan.not_as_frozen,
            "skipped_links": plan.skipped_links, "ingest_would_stop": delete_all_refusal(plan, cfg),
            "files": {"add": [f.source_path for f in plan.add], "update": [f.source_path for f in plan.update],
                      "retry": [f.source_path for f in plan.retry], "delete": plan.delete}}


def plan_lines(plan: Plan, cfg: JobConfig) -> list[str]:
    """`corpusmill plan`: the counts, then a line per file acted on or passed over."""
    out = [", ".join(f"{v} {k}" for k, v in plan.counts().items())
           + f" · {plan.hashed} file(s) read to hash; the rest unchanged by their listing"
           + (f" · {len(plan.skipped_links)} link(s) not followed" if plan.skipped_links else "")]
    if refusal := delete_all_refusal(plan, cfg):
        out.append(f"  ingest would stop: {refusal}")
    out += [f"  frozen {path} (changed or missing since the manifest: left out)" for path in plan.not_as_frozen]
    # links out of the root, loops, broken links: never read
    out += [f"  skip   {s['path']} ({s['reason']} -> {s['target'] or '?'})" for s in plan.skipped_links]
    out += [f"  {label:6} {f.source_path}" for label, files in (("add", plan.add), ("update", plan.update),
                                                                ("retry", plan.retry)) for f in files]
    out += [f"  delete {path}" for path in plan.delete]
    return out
