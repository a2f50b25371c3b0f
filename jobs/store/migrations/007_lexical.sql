-- Index-backed BM25 (jobs/store/lexical.py). Every chunk table gets a generated `lex` column: its text's
-- BM25 document weights as a pgvector sparsevec, one dimension per lexeme (a hash of it), under an HNSW
-- index for inner product, so a query's candidates come from an index instead of from every chunk that
-- shares one of its words. BM25's N and mean length are kept in `lexical_totals` by statement triggers on
-- each chunk table (one row per writing statement, folded into one row after each load), so no search
-- scans the table for them.

-- A lexeme's dimension: 1 .. 10^9, pgvector's largest sparsevec. Collisions only merge two lexemes' weights.
CREATE OR REPLACE FUNCTION lexeme_dimension(lexeme text) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
    RETURN (mod(hashtext(lexeme)::bigint + 2147483648, 1000000000) + 1)::integer;

-- A document's BM25 weights, tf (k1 + 1) / (tf + k1 (1 - b + b dl / pivot)) per lexeme (k1 = 1.2,
-- b = 0.75; tf = its positions, dl = its lexemes), the 1,000 largest only: an HNSW index takes no more.
-- The common case (at most 1,000 lexemes) skips the sort that the cap needs; the hash is written out
-- rather than called through lexeme_dimension, which costs a function call per lexeme on every write.
CREATE OR REPLACE FUNCTION bm25_document(doc tsvector, pivot double precision) RETURNS sparsevec
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path FROM CURRENT
    RETURN CASE WHEN length(doc) <= 1000 THEN
        (SELECT ('{' || coalesce(array_to_string(array_agg(d || ':' || w), ','), '') || '}/1000000000')::sparsevec
         FROM (SELECT mod(hashtext(lexeme)::bigint + 2147483648, 1000000000) + 1 AS d,
                      sum(tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * length(doc) / greatest(pivot, 1))))::real AS w
               FROM (SELECT lexeme, coalesce(array_length(positions, 1), 1) AS tf FROM unnest(doc)) u
               GROUP BY 1) y)
    ELSE
        (SELECT ('{' || string_agg(d || ':' || w, ',') || '}/1000000000')::sparsevec
         FROM (SELECT mod(hashtext(lexeme)::bigint + 2147483648, 1000000000) + 1 AS d,
                      sum(tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * length(doc) / greatest(pivot, 1))))::real AS w
               FROM (SELECT lexeme, coalesce(array_length(positions, 1), 1) AS tf FROM unnest(doc)) u
               GROUP BY 1 ORDER BY w DESC, d LIMIT 1000) y)
    END;

CREATE TABLE IF NOT EXISTS lexical_totals (
    chunk_table  text NOT NULL,
    chunks       bigint NOT NULL,
    lexemes      bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS lexical_totals_table_idx ON lexical_totals (chunk_table);

-- One row per statement that wrote a chunk table: its rows and lexemes added (INSERT, COPY) or taken
-- away (DELETE), both for UPDATE. Append-only, so parallel writers never wait on each other here.
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
        INSERT INTO lexical_totals SELECT TG_TABLE_NAME, count(*), coalesce(sum(length(tsv)), 0)
            FROM new_rows WHERE NOT coalesce(omitted, false) HAVING count(*) > 0;
    END IF;
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        INSERT INTO lexical_totals SELECT TG_TABLE_NAME, -count(*), -coalesce(sum(length(tsv)), 0)
            FROM old_rows WHERE NOT coalesce(omitted, false) HAVING count(*) > 0;
    END IF;
    RETURN NULL;
END
$$;
