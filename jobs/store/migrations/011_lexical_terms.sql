-- Text analysis leaves the database (jobs/terms.py, jobs/store/lexical.py). Chunk rows arrive with their
-- terms analysed on the Ray workers (lex_terms, lex_tfs, lex_length) and their BM25 weights (`lex`) as plain
-- columns; no generated column or per-row function runs on the write path. Each chunk table is upgraded
-- from the generated `tsv`/`lex` shape on its next ingest or load (jobs/store/lexical_upgrade.py).

-- One pivot per chunk table for BM25's length normalisation: set by the first commit into the empty table
-- (its rows' mean length) and fixed after, so no write rewrites the table. `backfilled` is false while an
-- older table's rows are being analysed by its upgrade.
CREATE TABLE IF NOT EXISTS lexical_pivots (
    chunk_table  text PRIMARY KEY,
    pivot        double precision NOT NULL,
    backfilled   boolean NOT NULL DEFAULT true
);

-- The statement triggers' function (migration 007) now sums the stored length: no text work. Chunk tables
-- keep its DELETE, UPDATE and TRUNCATE triggers; rows a writer COPYs are counted by the writer, since an
-- INSERT trigger's transition table holds a copy of every row written.
CREATE OR REPLACE FUNCTION lexical_count() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path FROM CURRENT
AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        DELETE FROM lexical_totals WHERE chunk_table = TG_TABLE_NAME;
        RETURN NULL;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO lexical_totals SELECT TG_TABLE_NAME, count(*), coalesce(sum(lex_length), 0)
            FROM new_rows WHERE NOT coalesce(omitted, false) HAVING count(*) > 0;
    END IF;
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        INSERT INTO lexical_totals SELECT TG_TABLE_NAME, -count(*), -coalesce(sum(lex_length), 0)
            FROM old_rows WHERE NOT coalesce(omitted, false) HAVING count(*) > 0;
    END IF;
    RETURN NULL;
END
$$;
