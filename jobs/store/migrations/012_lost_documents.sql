-- What a failure was recorded against: the content (sha256) and pipeline fingerprint of the document as the
-- run read it. A document lost by its worker (LostDocument) in `ray.lost_document_runs` runs in a row on the
-- same content and pipeline is then recorded failed for good (jobs/ingest.py _record_lost); the errors of
-- earlier runs say whether they were on that content. NULL in rows written before.

ALTER TABLE errors ADD COLUMN IF NOT EXISTS content_sha256 text;
ALTER TABLE errors ADD COLUMN IF NOT EXISTS pipeline_fingerprint text;
