"""The `plan` job: what an ingest would do, decided the way `ingest` decides it before it starts.

Kept apart from jobs/ingest.py so that `corpusmill plan` reads the listing and the store without
importing Ray, torch or spaCy (the stages' modules pull them in).
"""

from __future__ import annotations

import logging

from jobs.config import JobConfig
from jobs.sources.changes import Plan, make_plan
from jobs.sources.discover import discover
from jobs.sources.manifest import load_manifest, snapshot
from jobs.sources.storage import StorageOptions
from jobs.store.pgvector import PgStore
from jobs.store.url import database_url

log = logging.getLogger(__name__)


def make_plan_for(cfg: JobConfig, store: PgStore, storage: StorageOptions | None = None) -> tuple[Plan, list]:
    """Discover and plan. Files whose listing matches what the store recorded are not read (unless
    input.trust_listing is off); the sha256 of the others decides add/update/skip."""
    storage = storage or StorageOptions.from_config(cfg.storage)
    stored = store.stored_documents(cfg.collection)
    known = stored if cfg.input.trust_listing else None
    if cfg.input.manifest is None:
        files = discover(cfg.input.roots, cfg.input.include, cfg.input.exclude, storage, known,
                         follow_external_links=cfg.input.follow_external_links)
        return make_plan(files, stored, cfg.fingerprint(), cfg.keep_removed), files
    manifest = load_manifest(cfg.input.manifest)
    roots = cfg.input.roots or list(manifest["roots"])
    snap = snapshot(manifest, roots, cfg.input.include, cfg.input.exclude, storage, known,
                    follow_external_links=cfg.input.follow_external_links)
    # Changed or missing files keep whatever the store holds for them: the snapshot says nothing new.
    held = {p for p in snap.changed + snap.missing}
    plan = make_plan(snap.files, {p: d for p, d in stored.items() if p not in held}, cfg.fingerprint(),
                     cfg.keep_removed)
    plan.not_as_frozen = sorted(held)
    for path in plan.not_as_frozen:
        log.warning("%s changed or vanished since the manifest was frozen: left out of this run", path)
    return plan, snap.files


def plan_only(cfg: JobConfig) -> Plan:
    """What ingest would do; reads only the listing and the files whose listing changed, writes nothing."""
    with PgStore(database_url(cfg), cfg.database.schema_name) as store:
        store.migrate()
        plan, _ = make_plan_for(cfg, store)
        return plan
