-- Embedding spaces: every chunk table a collection has had. `corpusmill reembed` builds a new space
-- beside the active one (status building), switches the collection to it in one transaction
-- (active; the previous becomes retired) and `--drop-old` drops retired tables.

CREATE TABLE IF NOT EXISTS embedding_spaces (
    collection      text NOT NULL REFERENCES collections (name) ON DELETE CASCADE,
    chunk_table     text NOT NULL,
    embedding_model text NOT NULL,
    dimension       integer NOT NULL CHECK (dimension > 0),
    status          text NOT NULL CHECK (status IN ('building', 'active', 'retired')),
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (collection, chunk_table)
);

INSERT INTO embedding_spaces (collection, chunk_table, embedding_model, dimension, status)
SELECT name, chunk_table, embedding_model, dimension, 'active' FROM collections
ON CONFLICT DO NOTHING;
