"""The change plan: what an ingest must add, update, retry, skip or delete for a collection, from
the files discovered and what the store recorded for each (`StoredDoc`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only named in annotations: the store imports StoredDoc without the discovery stack
    from jobs.sources.discover import SourceFile


@dataclass(frozen=True)
class StoredDoc:
    source_path: str
    content_sha256: str | None
    pipeline_fingerprint: str | None
    status: str  # done | failed | pending
    # What the listing said when this content was loaded (size; `etag:…` or `mtime:…`): while a new
    # listing says the same, discovery trusts content_sha256 without reading the file.
    source_size: int | None = None
    source_etag: str | None = None
    # A `failed` document whose failure was its content's own: the sha256 and fingerprint it failed under
    # (None: a failure that says nothing about the content, retried by the next run). Its listing
    # (source_size, source_etag) is that content's.
    failed_sha256: str | None = None
    failed_fingerprint: str | None = None

    def failed_on(self, content_sha256: str, fingerprint: str) -> bool:
        """Whether this document failed on this very content under this pipeline (so would fail again)."""
        return (self.status == "failed" and self.failed_sha256 is not None and self.failed_sha256 == content_sha256
                and self.failed_fingerprint == fingerprint)


@dataclass
class Plan:
    add: list[SourceFile] = field(default_factory=list)
    update: list[SourceFile] = field(default_factory=list)  # content or pipeline changed
    retry: list[SourceFile] = field(default_factory=list)  # failed or interrupted last time
    # Unchanged files are counted, not kept: a rerun over a large corpus holds only what changed.
    unchanged: int = 0
    # Unchanged files that failed on this content under this pipeline: they stay failed, not processed again
    # (counted, like unchanged ones) unless the Planner was asked to retry them.
    failed_before: int = 0
    delete: list[str] = field(default_factory=list)  # source paths gone from the input
    # With --manifest: listed files that changed or vanished since the freeze (reported, not read).
    not_as_frozen: list[str] = field(default_factory=list)
    hashed: int = 0  # files read and hashed to make this plan (the rest were unchanged by their listing)
    # Unchanged files that were read because their listing changed (same content, re-uploaded or
    # touched; or still the content they failed on): the store should record their new listing so the
    # next plan does not read them again.
    # Kept here only when the Planner has no `on_relisted` to hand them to as it goes.
    relisted: list[SourceFile] = field(default_factory=list)
    # Local entries discovery passed over: {"root", "path", "reason", "target"}, reason one of
    # jobs.sources.listing.SKIP_REASONS (a link out of the root, a link loop, a broken link, a FIFO).
    skipped_links: list[dict] = field(default_factory=list)
    # Files handed to the Planner's `on_work` as the plan was made ({"add": n, …}): counted, not kept.
    handed: dict[str, int] = field(default_factory=dict)

    @property
    def to_process(self) -> list[SourceFile]:
        """The files to process this plan still holds (none of those it handed on)."""
        return self.add + self.update + self.retry

    @property
    def processing(self) -> int:
        """Files to process, held or handed on."""
        return len(self.to_process) + sum(self.handed.values())

    def hand_over(self, on_work: Callable[[list[SourceFile]], None]) -> None:
        """Hand the files to process this plan holds to `on_work` (then it holds only their counts)."""
        for kind in ("add", "update", "retry"):
            files = getattr(self, kind)
            if files:
                on_work(files)
                self.handed[kind] = self.handed.get(kind, 0) + len(files)
                setattr(self, kind, [])

    @property
    def deletes_all(self) -> bool:
        """Whether the plan deletes every document the collection holds and finds nothing in their place
        (an empty or wrong input). Every document replaced by files at other paths (a tree renamed or
        moved into a folder) is not this."""
        return bool(self.delete) and not any(self.counts()[k] for k in ("add", "update", "retry", "skip",
                                                                          "failed_before"))

    def counts(self) -> dict[str, int]:
        return {
            "add": len(self.add) + self.handed.get("add", 0),
            "update": len(self.update) + self.handed.get("update", 0),
            "retry": len(self.retry) + self.handed.get("retry", 0),
            "skip": self.unchanged,
            "delete": len(self.delete),
            "failed_before": self.failed_before,
        }

    def discovery(self) -> dict:
        """What discovery passed over, for the run's qa/metrics.json (`discovery`), where the QA report
        lists it. Kept out of counts(): those are files acted on, and callers sum them."""
        by_reason: dict[str, int] = {}
        for entry in self.skipped_links:
            by_reason[entry["reason"]] = by_reason.get(entry["reason"], 0) + 1
        return {"skipped": len(self.skipped_links), "skipped_by_reason": dict(sorted(by_reason.items())),
                "skipped_links": list(self.skipped_links)}


class Planner:
    """A plan made a page of files at a time (jobs.sources.discover.iter_discovered's pages: each file
    with what the store holds for it), so that what it holds grows with the work, not the corpus.
    `on_relisted(files)`: takes each page's relisted files (the ingest records their listing at once)
    instead of the plan keeping them. `on_work(files)`: likewise each page's files to process (the
    ingest stores them as work items, jobs/store/work_items.py), so that a first run over a million
    files holds a page of them, not the million. `retry_failed`: files that failed on their current
    content are processed again too (else they stay failed until they or the pipeline change)."""

    def __init__(self, fingerprint: str, on_relisted: Callable[[list[SourceFile]], None] | None = None,
                 on_work: Callable[[list[SourceFile]], None] | None = None, retry_failed: bool = False):
        self.plan, self.fingerprint, self.on_relisted, self.on_work = Plan(), fingerprint, on_relisted, on_work
        self.retry_failed = retry_failed

    def add(self, page: Iterable[tuple[SourceFile, StoredDoc | None]]) -> None:
        plan, relisted = self.plan, []
        for f, doc in page:
            plan.hashed += f.hashed
            if doc is None:
                plan.add.append(f)
            elif not self.retry_failed and doc.failed_on(f.content_sha256, self.fingerprint):
                plan.failed_before += 1
                if f.hashed:  # read because its listing changed: record the new one, so it is not read again
                    relisted.append(f)
            elif doc.status != "done":
                plan.retry.append(f)
            elif doc.content_sha256 != f.content_sha256 or doc.pipeline_fingerprint != self.fingerprint:
                plan.update.append(f)
            else:
                plan.unchanged += 1
                if f.hashed:
                    relisted.append(f)
        if relisted and self.on_relisted:
            self.on_relisted(relisted)
        else:
            plan.relisted += relisted
        if self.on_work:
            plan.hand_over(self.on_work)

    def finish(self, not_listed: Iterable[str], skipped_links: list[dict], keep_removed: bool = False) -> Plan:
        """The plan, with `not_listed` (stored paths the listing did not find) planned for deletion
        unless `keep_removed`, or they lie under a directory the listing could not open: there absence
        proves nothing, so what is stored is kept."""
        plan = self.plan
        plan.skipped_links = list(skipped_links)
        if not keep_removed:
            held = tuple(s["path"].rstrip("/") + "/" for s in plan.skipped_links if s["reason"] == "unreadable")
            held_all = any(h == "./" for h in held)
            plan.delete = sorted(p for p in not_listed if not held_all and not p.startswith(held))
        return plan


def make_plan(
    files: list[SourceFile], stored: dict[str, StoredDoc], fingerprint: str, keep_removed: bool = False,
    retry_failed: bool = False,
) -> Plan:
    """The plan of a whole list of files against the whole of what the store holds (a frozen
    manifest's snapshot, tests); jobs/plan.py plans a listing page by page."""
    planner = Planner(fingerprint, retry_failed=retry_failed)
    planner.add((f, stored.get(f.source_path)) for f in files)
    present = {f.source_path for f in files}
    # discover()'s result carries what it passed over (a Discovered); a plain list carries nothing.
    return planner.finish([p for p in stored if p not in present], getattr(files, "skipped", []), keep_removed)
