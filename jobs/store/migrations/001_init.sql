-- corpusmill schema, version 1. Applied by jobs/store/pgvector.py inside the configured schema
-- (search_path is set to it), once, under an advisory lock. Per-collection chunk tables are created
-- by code, because their vector dimension comes from the embedding model.

CREATE TABLE IF NOT EXISTS collections (
    name            text PRIMARY KEY,
    embedding_model text NOT NULL,
    dimension       integer NOT NULL CHECK (dimension > 0),
    chunk_table     text NOT NULL UNIQUE,      -- the active embedding space of the collection
    created_at      timestamptz NOT NULL DEFAULT now()
);

-- One row per source document: the checkpoint. A document is `done` only in the same transaction
-- that replaced its chunks, so its row and its chunks always agree.
CREATE TABLE IF NOT EXISTS documents (
    collection           text NOT NULL REFERENCES collections (name) ON DELETE CASCADE,
    source_path          text NOT NULL,
    doc_id               text NOT NULL,
    source_type          text NOT NULL,
    content_sha256       text,                 -- of the content whose chunks are loaded
    pipeline_fingerprint text,
    status               text NOT NULL CHECK (status IN ('pending', 'done', 'failed')),
    chunk_count          integer NOT NULL DEFAULT 0,
    run_id               text,
    last_error           text,
    updated_at           timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (collection, source_path)
);
CREATE INDEX IF NOT EXISTS documents_status_idx ON documents (collection, status);

CREATE TABLE IF NOT EXISTS runs (
    run_id               text PRIMARY KEY,
    collection           text NOT NULL,
    config               jsonb NOT NULL,       -- secrets masked
    pipeline_fingerprint text NOT NULL,
    started_at           timestamptz NOT NULL DEFAULT now(),
    finished_at          timestamptz,
    status               text NOT NULL DEFAULT 'running',  -- running | ok | failed_files | aborted
    counts               jsonb NOT NULL DEFAULT '{}',
    stage_stats          jsonb NOT NULL DEFAULT '{}',
    output_dir           text
);

CREATE TABLE IF NOT EXISTS errors (
    id          bigserial PRIMARY KEY,
    run_id      text NOT NULL,
    collection  text NOT NULL,
    source_path text NOT NULL,
    stage       text NOT NULL,
    error_class text NOT NULL,
    message     text NOT NULL,
    retryable   boolean NOT NULL DEFAULT true,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS errors_run_idx ON errors (run_id);
CREATE INDEX IF NOT EXISTS errors_path_idx ON errors (collection, source_path);
