-- Rows of a document that a parallel writer received only in part (Ray Data can split one document's
-- rows across write tasks): kept here as Arrow IPC until the end of the write assembles the document
-- and commits it whole (jobs/store/writers.py). Unlogged: a server crash loses them, and the
-- documents they belong to stay pending, so the next run does them again.

CREATE UNLOGGED TABLE IF NOT EXISTS staged_rows (
    run_id      text NOT NULL,
    collection  text NOT NULL,
    doc_id      text NOT NULL,
    rows        bytea NOT NULL,
    staged_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS staged_rows_doc_idx ON staged_rows (run_id, collection, doc_id);
