-- Document metadata on every chunk (front matter keys, a workbook's sheet names; jobs/chunks/metadata.py):
-- a `metadata jsonb` column on each chunk table, for filtered search (jobs/search/filters.py), under a GIN
-- index (jsonb_path_ops: the containment tests a filter compiles to). Tables made after this migration
-- get both when they are created. Existing chunks hold NULL until their documents are re-chunked (the
-- pipeline version that brought the column re-chunks every document on its next run).
DO $$
DECLARE
    t text;
BEGIN
    FOR t IN SELECT DISTINCT s.chunk_table FROM embedding_spaces s
             JOIN pg_class c ON c.relname = s.chunk_table
             JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = current_schema()
    LOOP
        EXECUTE format('ALTER TABLE %I ADD COLUMN IF NOT EXISTS metadata jsonb', t);
        EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON %I USING gin (metadata jsonb_path_ops)',
                       left(t, 50) || '_metadata_idx', t);
    END LOOP;
END $$;
