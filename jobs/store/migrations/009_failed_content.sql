-- What a failed document failed on: the sha256 of its content and the pipeline fingerprint, recorded when
-- the failure was its content's own (a file that is not UTF-8, a workbook openpyxl cannot read). While the
-- file and the pipeline stay the same the plan does not process it again (`ingest --retry-failed` does).
-- NULL for a failure that says nothing about the content (a worker lost, the network): the next run
-- retries it. content_sha256 keeps describing the chunks that are loaded (an update that failed keeps its
-- old chunks).

ALTER TABLE documents ADD COLUMN IF NOT EXISTS failed_sha256 text;
ALTER TABLE documents ADD COLUMN IF NOT EXISTS failed_fingerprint text;
