"""The change plan: what an ingest must add, update, retry, skip or delete for a collection."""

from __future__ import annotations

from dataclasses import dataclass, field

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


def make_plan(
    files: list[SourceFile], stored: dict[str, StoredDoc], fingerprint: str, keep_removed: bool = False
) -> Plan:
    plan = Plan(hashed=sum(f.hashed for f in files))
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
        plan.delete = sorted(p for p in stored if p not in present)
    return plan
