-- Chunk text a document shares with another document of its collection (same text_sha256): the first
-- document committed with it holds the chunk; each later one records its copy here instead of storing
-- a second vector (jobs/store/shared_text.py). When the holder changes or leaves, the documents listed
-- for its texts are marked pending, so the next run re-chunks one of them to hold it.

CREATE TABLE IF NOT EXISTS shared_text (
    collection  text NOT NULL REFERENCES collections (name) ON DELETE CASCADE,
    doc_id      text NOT NULL,
    chunk_id    text NOT NULL,                 -- the copy's id (its row is in the run's Parquet)
    text_sha256 text NOT NULL,
    PRIMARY KEY (collection, doc_id, chunk_id)
);
CREATE INDEX IF NOT EXISTS shared_text_hash_idx ON shared_text (collection, text_sha256);
