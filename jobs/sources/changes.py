"""The change plan: what an ingest must add, update, retry, skip or delete for a collection, from
the files discovered and what the store recorded for each (`StoredDoc`)."""

from __future__ import annotations

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


@dataclass
class Plan:
    add: list[SourceFile] = field(default_factory=list)
    update: list[SourceFile] = field(default_factory=list)  # content or pipeline changed
    retry: list[SourceFile] = field(default_factory=list)  # failed or interrupted last time
    skip: list[SourceFile] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)  # source paths gone from the input
    # With --manifest: listed files that changed or vanished since the freeze (reported, not read).
    not_as_frozen: list[str] = field(default_factory=list)
    hashed: int = 0  # files read and hashed to make this plan (the rest were unchanged by their listing)
    # Local entries discovery passed over: {"root", "path", "reason", "target"}, reason one of
    # jobs.sources.listing.SKIP_REASONS (a link out of the root, a link loop, a broken link, a FIFO).
    skipped_links: list[dict] = field(default_factory=list)

    @property
    def relisted(self) -> list[SourceFile]:
        """Skipped files that were read because their listing changed (same content): the store should
        record their new listing, so the next plan does not read them again."""
        return [f for f in self.skip if f.hashed]

    @property
    def to_process(self) -> list[SourceFile]:
        return self.add + self.update + self.retry

    def counts(self) -> dict[str, int]:
        return {
            "add": len(self.add),
            "update": len(self.update),
            "retry": len(self.retry),
            "skip": len(self.skip),
            "delete": len(self.delete),
        }

    def discovery(self) -> dict:
        """What discovery passed over, for the run's qa/metrics.json (`discovery`), where the QA report
        lists it. Kept out of counts(): those are files acted on, and callers sum them."""
        by_reason: dict[str, int] = {}
        for entry in self.skipped_links:
            by_reason[entry["reason"]] = by_reason.get(entry["reason"], 0) + 1
        return {"skipped": len(self.skipped_links), "skipped_by_reason": dict(sorted(by_reason.items())),
                "skipped_links": list(self.skipped_links)}


def make_plan(
    files: list[SourceFile], stored: dict[str, StoredDoc], fingerprint: str, keep_removed: bool = False
) -> Plan:
    # discover()'s result carries what it passed over (a Discovered); a plain list carries nothing.
    plan = Plan(hashed=sum(f.hashed for f in files), skipped_links=list(getattr(files, "skipped", [])))
    for f in files:
        doc = stored.get(f.source_path)
        if doc is None:
            plan.add.append(f)
        elif doc.status != "done":
            plan.retry.append(f)
        elif doc.content_sha256 != f.content_sha256 or doc.pipeline_fingerprint != fingerprint:
            plan.update.append(f)
        else:
            plan.skip.append(f)
    if not keep_removed:
        present = {f.source_path for f in files}
        # Under a directory the listing could not open, absence proves nothing: keep what is stored.
        held = tuple(s["path"].rstrip("/") + "/" for s in plan.skipped_links if s["reason"] == "unreadable")
        held_all = any(h == "./" for h in held)
        plan.delete = sorted(p for p in stored if p not in present and not held_all and not p.startswith(held))
    return plan
